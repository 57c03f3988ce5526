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
