import { describe, expect, it } from 'vitest';
import { classifyLimitHit, type Ending } from './limit-hit.js';
import { DEFAULT_LIMITS } from './types.js';

const limits = { ...DEFAULT_LIMITS, cpuSeconds: 2, processes: 64 };
const ending = (over: Partial<Ending>): Ending => ({
  exitCode: 0,
  signal: null,
  stderr: '',
  cpuSeconds: 0.1,
  peakTasks: 1,
  ...over,
});

describe('classifyLimitHit', () => {
  it.each([
    ['a clean exit', ending({}), null],
    ['an ordinary failure', ending({ exitCode: 1, stderr: 'boom' }), null],
    ['SIGXCPU', ending({ exitCode: null, signal: 'SIGXCPU' }), 'cpu'],
    ['SIGKILL at the hard CPU limit', ending({ exitCode: null, signal: 'SIGKILL', cpuSeconds: 3 }), 'cpu'],
    ['SIGKILL with little CPU (an OOM kill, a kill -9)', ending({ exitCode: null, signal: 'SIGKILL' }), null],
    [
      "the group's OOM killer ended a process",
      ending({ exitCode: null, signal: 'SIGKILL', group: { oomKills: 1, forksRefused: 0 } }),
      'memory',
    ],
    [
      'the group refused a fork',
      ending({ exitCode: 1, group: { oomKills: 0, forksRefused: 3 } }),
      'processes',
    ],
    ['a group that counted nothing', ending({ exitCode: 1, group: { oomKills: 0, forksRefused: 0 } }), null],
    [
      'a shell reporting SIGXCPU',
      ending({ exitCode: 152, stderr: 'line 1: 7 CPU time limit exceeded' }),
      'cpu',
    ],
    ['SIGXFSZ', ending({ exitCode: null, signal: 'SIGXFSZ' }), 'file_size'],
    [
      'a shell reporting SIGXFSZ',
      ending({ exitCode: 153, stderr: '7 File size limit exceeded' }),
      'file_size',
    ],
    ['EFBIG in Python', ending({ exitCode: 1, stderr: 'OSError: [Errno 27] File too large' }), 'file_size'],
    ['the peak process count at the limit', ending({ peakTasks: 63 }), 'processes'],
    ['fork failures', ending({ stderr: 'bash: fork: retry: Resource temporarily unavailable' }), 'processes'],
    ['MemoryError', ending({ exitCode: 1, stderr: 'Traceback...\nMemoryError\n' }), 'memory'],
    ['ENOMEM', ending({ exitCode: 1, stderr: 'cannot allocate: Cannot allocate memory' }), 'memory'],
    ['MemoryError text in a successful run', ending({ stderr: 'handled MemoryError' }), null],
    [
      'a kill over the disk quota',
      ending({ exitCode: null, signal: 'SIGKILL', stderr: 'File too large', overDiskQuota: true }),
      'disk',
    ],
  ])('%s', (_, input, expected) => {
    expect(classifyLimitHit(input, limits)).toBe(expected);
  });
});
