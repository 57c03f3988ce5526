import { Agent, request, errors as undiciErrors } from 'undici';
import { StepwiseError, ValidationError } from '../domain/errors.js';

/*
 * How the gateway reaches an inference engine. An engine is a kind (what wire it speaks and whether
 * it returns token ids) plus a transport (how bytes get there): HTTP for a real server, an in-process
 * fetch for the built-in sim, so the sim is driven through exactly the same wire code as vLLM.
 */

export type EngineKind = 'vllm' | 'sglang' | 'openai' | 'sim';

const KINDS: readonly string[] = ['sim', 'vllm', 'sglang', 'openai'] satisfies EngineKind[];
const isKind = (kind: string): kind is EngineKind => KINDS.includes(kind);

export interface EngineSpec {
  kind: EngineKind;
  /** Base URL without the trailing `/v1` (null for the built-in sim). */
  url: string | null;
  /** A stable name for logs and the `engine_id` of captured steps. */
  id: string;
  /** The model's folder (tokenizer files, chat template): `,model-dir=DIR`; Qwen3's built-in files when absent. */
  modelDir?: string;
  /** The model family by name (`,family=llama3`); detected from the folder when absent. */
  family?: string;
}

const ENGINE_OPTIONS = ['model-dir', 'family'] as const;

/** The `,key=value` options after an engine's kind and URL. */
function parseEngineOptions(
  text: string,
  options: readonly string[],
): Pick<EngineSpec, 'modelDir' | 'family'> {
  const out: Pick<EngineSpec, 'modelDir' | 'family'> = {};
  for (const option of options) {
    const at = option.indexOf('=');
    const key = (at < 0 ? option : option.slice(0, at)).trim();
    const value = at < 0 ? '' : option.slice(at + 1).trim();
    if (!(ENGINE_OPTIONS as readonly string[]).includes(key))
      throw new ValidationError(
        `engine '${text}': unknown option '${key}' (options: ${ENGINE_OPTIONS.join(', ')})`,
        'engine',
      );
    if (value === '')
      throw new ValidationError(`engine '${text}': ${key} needs a value (${key}=...)`, 'engine');
    if (key === 'model-dir') out.modelDir = value;
    else out.family = value;
  }
  return out;
}

/**
 * `sim`, `vllm=http://host:8000`, `sglang=http://host:30000` or `openai=https://api.example.com/v1`,
 * each optionally followed by `,model-dir=DIR` and `,family=NAME`.
 */
export function parseEngineSpec(full: string): EngineSpec {
  const [text = '', ...rest] = full.split(',');
  const options = parseEngineOptions(full, rest);
  return { ...parseEngineTarget(text), ...options };
}

function parseEngineTarget(text: string): EngineSpec {
  const at = text.indexOf('=');
  const kind = (at < 0 ? text : text.slice(0, at)).trim();
  const url = at < 0 ? null : text.slice(at + 1).trim();
  if (!isKind(kind)) {
    throw new ValidationError(
      `engine '${text}': the kind must be sim, vllm, sglang or openai (e.g. --engine vllm=http://127.0.0.1:8000)`,
      'engine',
    );
  }
  if (kind === 'sim') {
    if (url) throw new ValidationError(`engine '${text}': the built-in sim takes no URL`, 'engine');
    return { kind, url: null, id: 'sim' };
  }
  if (!url)
    throw new ValidationError(`engine '${text}': ${kind} needs a URL (${kind}=http://host:port)`, 'engine');
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ValidationError(`engine '${text}': '${url}' is not a URL`, 'engine');
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new ValidationError(`engine '${text}': the URL must be http or https`, 'engine');
  }
  const base = parsed.href.replace(/\/+$/, '').replace(/\/v1$/, '');
  return { kind, url: base, id: `${kind}@${parsed.host}` };
}

/** An engine's answer before anything reads its body. */
export interface UpstreamReply {
  status: number;
  contentType: string;
  body: AsyncIterable<Uint8Array>;
  /** Reads the whole body as UTF-8 text (instead of iterating `body`). */
  text(): Promise<string>;
  /** Reads the whole body as it came (instead of iterating `body`). */
  bytes(): Promise<Buffer>;
  /** Stops reading and releases the connection. */
  discard(): void;
}

export interface Transport {
  send(
    method: 'GET' | 'POST',
    path: string,
    /** Text, or UTF-8 bytes (a big body built off the event loop). */
    body: string | Uint8Array | null,
    signal: AbortSignal,
  ): Promise<UpstreamReply>;
  close(): Promise<void>;
}

/** The engine could not be reached or did not answer; `sent` says whether any byte left for it. */
export class UpstreamError extends StepwiseError {
  override readonly name = 'UpstreamError';
  constructor(
    message: string,
    status: 502 | 503 | 504,
    readonly sent: boolean,
  ) {
    super(message, status, status === 504 ? 'upstream_timeout' : 'upstream_unavailable', undefined, true);
  }
}

export interface HttpTransportOptions {
  /** Sent as `Authorization: Bearer` (OpenAI-compatible APIs). */
  apiKey?: string;
  /** Longest wait for the response headers (the engine queues and prefills before answering). */
  headersTimeoutMs?: number;
  /** Longest silence between two body chunks once the answer started. */
  bodyTimeoutMs?: number;
  connections?: number;
}

/** Errors raised before the request could be written: retrying on another engine is safe. */
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH']);

function describe(error: unknown): string {
  const e = error as { code?: string; message?: string; cause?: { code?: string; message?: string } };
  return e.cause?.code ?? e.code ?? e.cause?.message ?? e.message ?? String(error);
}

export function httpTransport(baseUrl: string, options: HttpTransportOptions = {}): Transport {
  const headersTimeout = options.headersTimeoutMs ?? 600_000;
  const bodyTimeout = options.bodyTimeoutMs ?? 600_000;
  const agent = new Agent({
    connections: options.connections ?? 256,
    headersTimeout,
    bodyTimeout,
    keepAliveTimeout: 30_000,
  });
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: '*/*' };
  if (options.apiKey) headers.authorization = `Bearer ${options.apiKey}`;
  /** An answer's body that broke off: a silent engine is named with the timeout that cut it. */
  const bodyFailure = (error: unknown): unknown =>
    error instanceof undiciErrors.BodyTimeoutError
      ? new UpstreamError(
          `the engine at ${baseUrl} sent nothing for ${bodyTimeout} ms in the middle of an answer (raise --upstream-timeout-ms)`,
          504,
          true,
        )
      : error;
  const fail = (error: unknown): never => {
    throw bodyFailure(error);
  };
  return {
    async send(method, path, body, signal) {
      try {
        const reply = await request(`${baseUrl}${path}`, {
          method,
          headers,
          body: body ?? undefined,
          signal,
          dispatcher: agent,
        });
        const type = reply.headers['content-type'];
        const chunks = reply.body[Symbol.asyncIterator]();
        return {
          status: reply.statusCode,
          contentType: Array.isArray(type) ? (type[0] ?? '') : (type ?? ''),
          body: {
            [Symbol.asyncIterator]: () => ({
              next: () => chunks.next().catch(fail),
              return: () => chunks.return?.() ?? Promise.resolve({ done: true, value: undefined }),
            }),
          },
          text: () => reply.body.text().catch(fail),
          bytes: async () => Buffer.from(await reply.body.arrayBuffer().catch(fail)),
          discard: () => reply.body.destroy(),
        };
      } catch (error) {
        if (signal.aborted) throw error;
        const code = describe(error);
        if (error instanceof undiciErrors.HeadersTimeoutError) {
          throw new UpstreamError(
            `the engine at ${baseUrl} sent no response headers within ${headersTimeout} ms (raise --upstream-timeout-ms)`,
            504,
            true,
          );
        }
        if (error instanceof undiciErrors.ConnectTimeoutError || NOT_SENT.has(code)) {
          throw new UpstreamError(`the engine at ${baseUrl} is unreachable (${code})`, 503, false);
        }
        if (code === 'UND_ERR_SOCKET' || code === 'ECONNRESET') {
          // The request went out, so it is not retried elsewhere: it may have started a generation.
          throw new UpstreamError(
            `the engine at ${baseUrl} closed the connection before answering (${code})`,
            502,
            true,
          );
        }
        throw new UpstreamError(`the request to the engine at ${baseUrl} failed (${code})`, 502, true);
      }
    },
    close: () => agent.close(),
  };
}

/** In-process transport over a fetch handler (the built-in sim's Hono app): same bytes, no socket. */
export function fetchTransport(
  handler: (request: Request) => Response | Promise<Response>,
  origin = 'http://sim.local',
): Transport {
  return {
    async send(method, path, body, signal) {
      const response = await handler(
        new Request(`${origin}${path}`, {
          method,
          body,
          signal,
          headers: { 'content-type': 'application/json' },
        }),
      );
      const stream = response.body;
      return {
        status: response.status,
        contentType: response.headers.get('content-type') ?? '',
        body: stream ?? (async function* () {})(),
        text: () => response.text(),
        bytes: async () => Buffer.from(await response.arrayBuffer()),
        discard: () => void stream?.cancel().catch(() => {}),
      };
    },
    close: async () => {},
  };
}

/** Reads a reply body to its end as text. */
export async function readText(body: AsyncIterable<Uint8Array>): Promise<string> {
  const decoder = new TextDecoder();
  let text = '';
  for await (const chunk of body) text += decoder.decode(chunk, { stream: true });
  return text + decoder.decode();
}
