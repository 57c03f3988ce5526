import { z } from 'zod';

/*
 * `openclaw agent exec --json` prints one JSON envelope on stdout: the run's status, final text,
 * assistant turns and a summary of its tool calls. Fields are additive and may be absent, so the
 * schema is loose; what we keep goes into the trajectory's metadata.
 */

const Envelope = z.looseObject({
  ok: z.boolean().optional(),
  status: z.string().optional(),
  final: z.string().nullable().optional(),
  assistantTurns: z.number().optional(),
  toolSummary: z
    .looseObject({
      calls: z.number().optional(),
      tools: z.array(z.string()).optional(),
      failures: z.number().optional(),
      totalToolTimeMs: z.number().optional(),
    })
    .optional(),
  usage: z.looseObject({ input: z.number().optional(), output: z.number().optional() }).optional(),
  error: z.looseObject({ message: z.string().optional(), kind: z.string().optional() }).optional(),
  model: z.string().nullable().optional(),
  provider: z.string().nullable().optional(),
  sessionId: z.string().optional(),
});

export interface OpenClawEnvelope {
  ok: boolean;
  /** `ok`, `error` or `timeout`. */
  status: string;
  final: string | null;
  assistantTurns: number;
  toolCalls: number;
  toolFailures: number;
  tools: string[];
  error: { message: string; kind: string | null } | null;
  sessionId: string | null;
  usage: { input: number | null; output: number | null };
}

/**
 * The envelope from OpenClaw's stdout: the last line that parses as a JSON object (the envelope is
 * pretty-printed, so the whole text is tried first). Null when there is none.
 */
export function parseEnvelope(stdout: string): OpenClawEnvelope | null {
  const text = stdout.trim();
  const start = text.indexOf('{');
  if (start < 0) return null;
  let raw: unknown;
  try {
    raw = JSON.parse(text.slice(start));
  } catch {
    return null;
  }
  const parsed = Envelope.safeParse(raw);
  if (!parsed.success) return null;
  const e = parsed.data;
  const status = e.status ?? (e.ok ? 'ok' : 'error');
  return {
    ok: e.ok ?? status === 'ok',
    status,
    final: e.final ?? null,
    assistantTurns: e.assistantTurns ?? 0,
    toolCalls: e.toolSummary?.calls ?? 0,
    toolFailures: e.toolSummary?.failures ?? 0,
    tools: e.toolSummary?.tools ?? [],
    error: e.error ? { message: e.error.message ?? '', kind: e.error.kind ?? null } : null,
    sessionId: e.sessionId ?? null,
    usage: { input: e.usage?.input ?? null, output: e.usage?.output ?? null },
  };
}

/** What lands in the trajectory's metadata under `openclaw`. */
export function envelopeMetadata(
  envelope: OpenClawEnvelope,
  exitCode: number | null,
): Record<string, unknown> {
  return {
    status: envelope.status,
    exit_code: exitCode,
    assistant_turns: envelope.assistantTurns,
    tool_calls: envelope.toolCalls,
    tool_failures: envelope.toolFailures,
    tools: envelope.tools,
    session_id: envelope.sessionId,
    ...(envelope.error ? { error: envelope.error } : {}),
  };
}
