import type { ToolResult } from '../domain/index.js';
import { contentText } from '../text/content.js';

/*
 * A black-box agent never tells us what its tools returned, but the next request does: the outputs of
 * the previous step's tool calls arrive as `role: "tool"` messages after the assistant turn that made
 * the calls. They are attached to that step, with an error flag when the content says the tool failed
 * (CLEANER and the rewards read it). The signals are the ones agent harnesses commonly print.
 */

export interface AnsweredCall {
  id: string;
  name: string;
}

const ERROR_PATTERNS: [RegExp, string][] = [
  [/^\s*traceback \(most recent call last\)/im, 'exception'],
  [/^\s*(?:\w+\.)*[A-Z]\w*(?:Error|Exception):/m, 'exception'],
  [/\b(?:exit code|exit status|exited with(?: code)?|returncode)\s*[:=]?\s*(?!0\b)-?\d+/i, 'nonzero_exit'],
  [/\bcommand not found\b/i, 'command_not_found'],
  [/\bno such file or directory\b/i, 'not_found'],
  [/\bpermission denied\b/i, 'permission_denied'],
  [/\b(?:timed out|timeout expired)\b/i, 'timeout'],
  // Harnesses' refusals of a tool they do not have: OpenClaw "Tool X not found", Codex CLI
  // "unsupported call: X", Claude Code "No such tool available: X" (docs/codex.md#tool-errors).
  [
    /\bunknown tool\b|\btool .{1,80} (?:not found|does not exist)\b|^\s*unsupported (?:custom tool )?call: |\bno such tool available\b/im,
    'unknown_tool',
  ],
  [/\binvalid (?:arguments?|parameters?|json)\b/i, 'invalid_arguments'],
  // Generic markers last, so the specific kinds above win.
  [/^\s*error\b[\s:[(]/i, 'error'],
  [/^\s*\[error\]/i, 'error'],
];

/** Whether a tool's output reports a failure, and which kind. */
export function detectToolError(content: string): { error: boolean; errorType?: string } {
  const trimmed = content.trim();
  if (trimmed.startsWith('{')) {
    try {
      const parsed = JSON.parse(trimmed) as Record<string, unknown>;
      if (parsed && typeof parsed === 'object') {
        if (parsed.error !== undefined && parsed.error !== null && parsed.error !== false) {
          return { error: true, errorType: 'error' };
        }
        if (parsed.ok === false || parsed.success === false || parsed.status === 'error') {
          return { error: true, errorType: 'error' };
        }
        const code = parsed.exit_code ?? parsed.exitCode ?? parsed.returncode;
        if (typeof code === 'number')
          return code === 0 ? { error: false } : { error: true, errorType: 'nonzero_exit' };
        return { error: false };
      }
    } catch {
      // Not JSON: judged as text below.
    }
  }
  for (const [pattern, errorType] of ERROR_PATTERNS) {
    if (pattern.test(content)) return { error: true, errorType };
  }
  return { error: false };
}

/**
 * Set (a symbol key, so no JSON carries it) on a `tool` message whose tool said it failed: Anthropic's
 * `tool_result.is_error` (messages-request.ts). Such a result is an error whatever its text says.
 */
export const REPORTED_ERROR: unique symbol = Symbol('tool result reported as an error');

/** An id as harnesses rewrite it (OpenClaw sends `call_1` back as `call1`): letters and digits, one case. */
const normalizedId = (id: string) => id.replace(/[^0-9a-z]/gi, '').toLowerCase();

/**
 * The results of `calls` in a request's messages: the tool messages after the last assistant turn
 * that made those calls, matched by `tool_call_id` — exactly, else as the same letters and digits
 * (harnesses that rewrite ids drop separators) — or by position when the agent sent no ids, or ids
 * of which none matches (it replaced them all). A stray id among matching ones is skipped.
 * Empty when the request does not answer them (the agent started over, or called no tool).
 */
export function toolResultsFor(
  messages: readonly Record<string, unknown>[],
  calls: readonly AnsweredCall[],
): ToolResult[] {
  if (calls.length === 0) return [];
  const exact = new Map(calls.map((c) => [c.id, c]));
  // Ids with no letter or digit (or none at all) match nothing after normalizing.
  const normalized = new Map(
    calls.filter((c) => normalizedId(c.id) !== '').map((c) => [normalizedId(c.id), c]),
  );
  let lastAssistant = -1;
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i]!.role === 'assistant') {
      lastAssistant = i;
      break;
    }
  }
  const answers = messages
    .slice(lastAssistant + 1)
    .filter((m) => m.role === 'tool')
    .map((m) => {
      const id = typeof m.tool_call_id === 'string' ? m.tool_call_id : undefined;
      const byId = id === undefined ? undefined : (exact.get(id) ?? normalized.get(normalizedId(id)));
      return { m, id, byId };
    });
  const idsMatch = answers.some((a) => a.byId !== undefined);
  const results: ToolResult[] = [];
  answers.forEach(({ m, id, byId }, position) => {
    const call = id !== undefined && idsMatch ? byId : calls[position];
    if (!call) return;
    const content = contentText(m.content);
    const detected = detectToolError(content);
    const reported = (m as { [REPORTED_ERROR]?: unknown })[REPORTED_ERROR] === true;
    // The kind is read from the text where it tells one; the flag alone says only "error".
    const errorType = detected.errorType ?? (reported ? 'error' : undefined);
    results.push({
      tool_call_id: call.id,
      name: call.name,
      content,
      error: detected.error || reported,
      ...(errorType ? { error_type: errorType } : {}),
    });
  });
  return results;
}
