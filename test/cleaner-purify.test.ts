import { describe, expect, it } from 'vitest';
import { type PurifiableStep, purifyTrajectory } from '../packages/core/src/curation/cleaner/purify.js';
import { sequenceRatio } from '../packages/core/src/curation/cleaner/sequence-matcher.js';
import type { JsonObject } from '../packages/core/src/domain/json.js';

/*
 * Offline purification over steps shaped as the gateway stores them: each step's `messages` is the
 * request, `responseText`/`toolCalls` its answer, `toolResults` the results the next request carried
 * (flagged `error` by the gateway). Expected similarities are computed here from the documented text
 * (`canonical` below), not from the implementation's.
 */

const SYSTEM: JsonObject = { role: 'system', content: 'You are an agent.' };
const USER: JsonObject = { role: 'user', content: 'Sum input/numbers.txt into output/sum.txt.' };

interface Call {
  name: string;
  args: Record<string, unknown>;
  id?: string;
}
interface Turn {
  text: string | null;
  calls?: Call[];
  /** One result per call: `null` for success, an error type for a failure. */
  results?: (string | null)[];
  /** A user message the agent added after this turn's results. */
  userAfter?: string;
}

const wire = (c: Call, i: number) => ({
  id: c.id ?? `call_${i}`,
  type: 'function',
  function: { name: c.name, arguments: JSON.stringify(c.args) },
});

/** The steps a gateway would have stored for an agent that never rewrites its history. */
function stepsOf(turns: Turn[], trajectoryId = 'traj-1'): PurifiableStep[] {
  const history: JsonObject[] = [SYSTEM, USER];
  return turns.map((t, index) => {
    const messages = structuredClone(history);
    const toolCalls = t.calls?.map((c, i) => wire(c, i + 10 * index)) ?? null;
    history.push({ role: 'assistant', content: t.text, ...(toolCalls ? { tool_calls: toolCalls } : {}) });
    const toolResults =
      t.results?.map((err, i) => ({
        tool_call_id: toolCalls![i]!.id,
        name: t.calls![i]!.name,
        content: err ? `Error: ${err}` : 'ok',
        error: err !== null,
        ...(err ? { error_type: err } : {}),
      })) ?? null;
    for (const r of toolResults ?? [])
      history.push({ role: 'tool', tool_call_id: r.tool_call_id, content: r.content });
    if (t.userAfter) history.push({ role: 'user', content: t.userAfter });
    return { trajectoryId, index, messages, responseText: t.text, toolCalls, toolResults };
  });
}

/**
 * The documented text, for the flat string arguments used here: Python's json.dumps separators,
 * then the EOS the response ids end with (the authors decode the ids from `<tool_call>` to the end).
 */
const canonical = (c: Call) =>
  `<tool_call>\n{"name": "${c.name}", "arguments": {${Object.entries(c.args)
    .map(([k, v]) => `${JSON.stringify(k)}: ${JSON.stringify(v)}`)
    .join(', ')}}}\n</tool_call><|im_end|>`;

const readWrong: Call = { name: 'read', args: { path: 'input/numbers.txt_wrong' } };
const readRight: Call = { name: 'read', args: { path: 'input/numbers.txt' } };
const exec: Call = {
  name: 'exec',
  args: { command: 'python3 -c "print(sum(int(l) for l in open(\'input/numbers.txt\')))" > output/sum.txt' },
};
const other: Call = {
  name: 'exec',
  args: {
    command:
      'python3 - <<EOF\nimport csv, statistics\nrows = list(csv.DictReader(open("data/sales.csv")))\nprint(statistics.mean(float(r["amount"]) for r in rows))\nEOF',
  },
};

describe('purifyTrajectory (offline CLEANER)', () => {
  it('rolls a self-corrected failure out: shallow keeps P, takes K′ and its result', () => {
    const steps = stepsOf([
      { text: 'Reading the input.', calls: [readWrong], results: ['not_found'] },
      { text: 'Wrong path; retrying.', calls: [readRight], results: [null] },
      { text: 'Summing.', calls: [exec], results: [null] },
      { text: 'Done.' },
    ]);
    const before = structuredClone(steps);
    const out = purifyTrajectory(steps);
    const sim = sequenceRatio(canonical(readWrong), canonical(readRight));
    expect(sim).toBeGreaterThanOrEqual(0.5);
    expect(out.messages).toEqual([
      SYSTEM,
      USER,
      { role: 'assistant', content: 'Reading the input.', tool_calls: [wire(readRight, 10)] },
      { role: 'tool', tool_call_id: 'call_10', content: 'ok' },
      { role: 'assistant', content: 'Summing.', tool_calls: [wire(exec, 20)] },
      { role: 'tool', tool_call_id: 'call_20', content: 'ok' },
      { role: 'assistant', content: 'Done.' },
    ]);
    expect(out.repairs).toEqual([
      {
        failedStep: 0,
        retryStep: 1,
        similarity: sim,
        mode: 'shallow',
        errorTypes: ['not_found'],
        messageIndex: 2,
        removedMessages: 2,
      },
    ]);
    expect(out.derivation).toMatchObject({
      derived_from: 'traj-1',
      purified_offline: true,
      mode: 'shallow',
      similarity: [sim],
      removed_error_types: { not_found: 1 },
      purified_step_indices: [0, 1],
      cleaner: { rollbacks_triggered: 1, recovered: 1, failed: 0, shallow: 1, deep: 0 },
    });
    // The stored steps are untouched, and the result shares no object with them.
    expect(steps).toEqual(before);
    (out.messages[0] as { content: string }).content = 'changed';
    expect(steps[3]!.messages![0]).toEqual(SYSTEM);
  });

  it('a distant regeneration replaces the whole turn (deep)', () => {
    const out = purifyTrajectory(
      stepsOf([
        { text: 'Reading the input.', calls: [readWrong], results: ['not_found'] },
        { text: 'Another way.', calls: [other], results: [null] },
        { text: 'Done.' },
      ]),
    );
    const sim = sequenceRatio(canonical(readWrong), canonical(other));
    expect(sim).toBeLessThan(0.5);
    expect(out.messages.slice(2)).toEqual([
      { role: 'assistant', content: 'Another way.', tool_calls: [wire(other, 10)] },
      { role: 'tool', tool_call_id: 'call_10', content: 'ok' },
      { role: 'assistant', content: 'Done.' },
    ]);
    expect(out.repairs).toMatchObject([{ mode: 'deep', similarity: sim }]);
    expect(out.derivation).toMatchObject({ mode: 'deep' });
  });

  it('a chain of failures folds into one turn; each rollback is recorded', () => {
    const mid: Call = { name: 'read', args: { path: 'input/numbers.text' } };
    const out = purifyTrajectory(
      stepsOf([
        { text: 'P0', calls: [readWrong], results: ['not_found'] },
        { text: 'P1', calls: [mid], results: ['not_found'] },
        { text: 'P2', calls: [readRight], results: [null] },
        { text: 'Done.' },
      ]),
    );
    expect(out.messages.slice(2)).toEqual([
      { role: 'assistant', content: 'P0', tool_calls: [wire(readRight, 20)] },
      { role: 'tool', tool_call_id: 'call_20', content: 'ok' },
      { role: 'assistant', content: 'Done.' },
    ]);
    expect(out.repairs.map((r) => [r.failedStep, r.retryStep, r.mode, r.similarity])).toEqual([
      [0, 1, 'shallow', sequenceRatio(canonical(readWrong), canonical(mid))],
      [1, 2, 'shallow', sequenceRatio(canonical(mid), canonical(readRight))],
    ]);
    expect(out.report.metrics).toMatchObject({ rollbacksTriggered: 1, recovered: 1, shallow: 2 });
  });

  it('keeps what is not a self-correction: a user reply after the error, an answer instead of a retry', () => {
    const userReply = stepsOf([
      { text: 'P0', calls: [readWrong], results: ['not_found'], userAfter: 'Try the other file.' },
      { text: 'P1', calls: [readRight], results: [null] },
      { text: 'Done.' },
    ]);
    const kept = purifyTrajectory(userReply);
    expect(kept.changed).toBe(false);
    expect(kept.derivation).toBeNull();
    expect(kept.messages).toEqual([...userReply[2]!.messages!, { role: 'assistant', content: 'Done.' }]);
    expect(kept.report.metrics).toMatchObject({ rollbacksTriggered: 1, failed: 1, enabled: true });

    // T′ has no tool call: the error stays, and no later failure is rolled back.
    const gaveUp = purifyTrajectory(
      stepsOf([
        { text: 'P0', calls: [readWrong], results: ['not_found'] },
        { text: 'I cannot find it.', userAfter: 'Please try again.' },
        { text: 'P2', calls: [readWrong], results: ['not_found'] },
        { text: 'P3', calls: [readRight], results: [null] },
        { text: 'Done.' },
      ]),
    );
    expect(gaveUp.changed).toBe(false);
    expect(gaveUp.report.metrics).toMatchObject({
      rollbacksTriggered: 1,
      failed: 1,
      disabledBy: 'no_tool_call',
    });
  });

  it('matches turns to steps by their answers, not by ids (an engine may reuse one id)', () => {
    const same = (c: Call): Call => ({ ...c, id: 'call_same' });
    const steps = stepsOf([
      { text: null, calls: [same(readWrong)], results: ['unknown_tool'] },
      { text: 'Retrying.', calls: [same(readRight)], results: [null] },
      { text: null, calls: [same(exec)], results: [null] },
      { text: 'Done.' },
    ]);
    const out = purifyTrajectory(steps);
    expect(out.repairs.map((r) => [r.failedStep, r.retryStep, r.errorTypes])).toEqual([
      [0, 1, ['unknown_tool']],
    ]);
    expect(out.messages.filter((m) => m.role === 'tool').map((m) => m.content)).toEqual(['ok', 'ok']);
  });

  it('p = 0 purifies nothing; a fractional p is drawn per trajectory from its id', () => {
    const turns: Turn[] = [
      { text: 'P0', calls: [readWrong], results: ['not_found'] },
      { text: 'P1', calls: [readRight], results: [null] },
      { text: 'Done.' },
    ];
    expect(purifyTrajectory(stepsOf(turns), { p: 0 }).changed).toBe(false);
    const decisions = Array.from(
      { length: 200 },
      (_, i) => purifyTrajectory(stepsOf(turns, `t${i}`), { p: 0.5 }).changed,
    );
    expect(decisions).toEqual(
      Array.from({ length: 200 }, (_, i) => purifyTrajectory(stepsOf(turns, `t${i}`), { p: 0.5 }).changed),
    );
    const share = decisions.filter(Boolean).length / decisions.length;
    expect(share).toBeGreaterThan(0.35);
    expect(share).toBeLessThan(0.65);
  });
});
