import { type InjectedErrorKind, REFERENCE_ERROR_KINDS } from '@stepwise/core/engines/sim/policies.js';
import { InvalidArgumentError } from 'commander';

/** Parses an integer flag of at least `min`; a bad value names the flag. */
export function positiveInt(flag: string, min = 1) {
  return (value: string) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min)
      throw new InvalidArgumentError(`${flag} must be an integer >= ${min}`);
    return n;
  };
}

/** Parses a flag that is a number from 0 to 1. */
export function probability(flag: string) {
  return (value: string) => {
    const n = Number(value);
    if (!Number.isFinite(n) || n < 0 || n > 1)
      throw new InvalidArgumentError(`${flag} must be a number from 0 to 1`);
    return n;
  };
}

/** Parses a flag that is a finite number of at least 0. */
export function nonNegative(flag: string) {
  return (value: string) => {
    const n = Number(value);
    if (!Number.isFinite(n) || n < 0) throw new InvalidArgumentError(`${flag} must be a number >= 0`);
    return n;
  };
}

/** `--error-kinds wrong_argument,unknown_tool`: the reference policy's injected error kinds. */
export function errorKinds(value: string): InjectedErrorKind[] {
  const kinds = value.split(',').map((k) => k.trim());
  const bad = kinds.find((k) => !(REFERENCE_ERROR_KINDS as readonly string[]).includes(k));
  if (bad !== undefined)
    throw new InvalidArgumentError(
      `must list ${REFERENCE_ERROR_KINDS.join(', ')} (comma-separated), not ${JSON.stringify(bad)}`,
    );
  return kinds as InjectedErrorKind[];
}
