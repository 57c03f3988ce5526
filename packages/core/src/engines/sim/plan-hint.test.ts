import { describe, expect, it } from 'vitest';
import { neededPlanSteps, shownPlanSteps } from './plan-hint.js';

const actions = [{ name: 'read' }, { name: 'write' }, { name: 'exec' }];

describe('shownPlanSteps', () => {
  it('counts the numbered lines that show the actions in order, from the first', () => {
    expect(shownPlanSteps('Do it.', actions)).toBe(0);
    expect(shownPlanSteps('Do it.\n\nPlan:\n1. read: {"path": "a"}\n2. write: {}', actions)).toBe(2);
    expect(shownPlanSteps('1. read: {}\n2. write: {}\n3. exec: {}', actions)).toBe(3);
    // A gap stops the count; a wrong tool name at a position is not that step.
    expect(shownPlanSteps('1. read: {}\n3. exec: {}', actions)).toBe(1);
    expect(shownPlanSteps('1. write: {}', actions)).toBe(0);
  });

  it('needs ⌈share × n⌉ steps', () => {
    expect(neededPlanSteps(4, 0.75)).toBe(3);
    expect(neededPlanSteps(10, 0.3)).toBe(3);
    expect(neededPlanSteps(4, 0)).toBe(0);
    expect(neededPlanSteps(4, 1)).toBe(4);
  });
});
