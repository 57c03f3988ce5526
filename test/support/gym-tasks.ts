import { GymTask } from '../../packages/gym/src/tasks/schema.js';

/*
 * Two small gym tasks the runner and CLEANER tests share: a sum read from a file and written with a
 * command, and a JSON file written directly. `before` puts reference actions ahead of the write.
 */

export const sumTask = (): GymTask =>
  GymTask.parse({
    id: 'sum-1',
    prompt:
      'Read input/numbers.txt (one integer per line) and write their sum to output/sum.txt. All file paths are relative to the workspace directory.',
    files: [{ path: 'input/numbers.txt', content: '3\n4\n5\n' }],
    verifier: {
      kind: 'checks',
      checks: [
        { kind: 'file_exists', name: 'exists', path: 'output/sum.txt' },
        { kind: 'text_contains', name: 'value', path: 'output/sum.txt', pattern: '^12\\s*$', regex: true },
      ],
    },
    referenceActions: [
      { name: 'read', arguments: { path: 'input/numbers.txt' } },
      {
        name: 'exec',
        arguments: {
          command:
            'mkdir -p output && python3 -c "print(sum(int(l) for l in open(\'input/numbers.txt\')))" > output/sum.txt',
        },
      },
    ],
    category: 'Analysis & Reasoning',
  });

export const jsonTask = (before: { name: string; arguments: Record<string, unknown> }[] = []): GymTask =>
  GymTask.parse({
    id: 'json-1',
    prompt:
      'Write output/info.json with keys name ("stepwise") and version (1). All file paths are relative to the workspace directory.',
    verifier: {
      kind: 'checks',
      checks: [
        { kind: 'parses', name: 'parses', path: 'output/info.json', format: 'json' },
        {
          kind: 'json_value',
          name: 'name',
          path: 'output/info.json',
          pointer: '/name',
          expected: 'stepwise',
        },
      ],
    },
    referenceActions: [
      ...before,
      {
        name: 'write',
        arguments: { path: 'output/info.json', content: '{"name": "stepwise", "version": 1}\n' },
      },
    ],
    category: 'Software Development',
  });

/**
 * A task whose verifier wants output/<id>.txt to contain `pattern`; its reference action writes `ok`,
 * so a verifier that wants anything else fails the same workspace (re-verification's tests).
 */
export const okTask = (id: string, pattern: string): GymTask =>
  GymTask.parse({
    id,
    prompt: `Write output/${id}.txt containing ok. All file paths are relative to the workspace directory.`,
    verifier: {
      kind: 'checks',
      checks: [{ kind: 'text_contains', name: 'ok', path: `output/${id}.txt`, pattern }],
    },
    referenceActions: [{ name: 'write', arguments: { path: `output/${id}.txt`, content: 'ok' } }],
    category: 'Analysis & Reasoning',
  });
