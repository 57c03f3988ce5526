/** An answer for the agent before an HTTP layer frames it: direct.ts writes it to the socket. */
export interface Answer {
  status: number;
  headers: Readonly<Record<string, string>>;
  body: string | Uint8Array | StreamSource | null;
}

/**
 * A streamed body, pulled by its reader like a ReadableStream's underlying source: each `pull`
 * writes what came next (or ends the stream) and settles; `cancel` when the agent went away.
 */
export interface StreamSource {
  pull(sink: StreamSink): Promise<void>;
  cancel(): Promise<void>;
}

/** What a StreamSource writes into. */
export interface StreamSink {
  enqueue(text: string): void;
  /** The answer is whole. */
  close(): void;
  /** The answer broke off: the agent sees its connection cut. */
  error(error: unknown): void;
}

export const isStreamSource = (body: Answer['body']): body is StreamSource =>
  typeof body === 'object' && body !== null && 'pull' in body;

export const JSON_HEADERS: Readonly<Record<string, string>> = { 'content-type': 'application/json' };
