/**
 * A pool rule, written once for both backends as a generator: each row primitive is `yield*`-ed.
 * SQLite's primitives never yield, so a rule runs synchronously inside better-sqlite3's
 * transaction; PostgreSQL's yield their query promise, which `runAsync` awaits.
 */
export type Rule<T> = Generator<Promise<unknown>, T, unknown>;

/** A primitive's value as a rule that has nothing to wait for (SQLite's reads and writes). */
// biome-ignore lint/correctness/useYield: a synchronous primitive has nothing to wait for.
export function* done<T>(value: T): Rule<T> {
  return value;
}

/** Runs a rule whose primitives are synchronous (SQLite), inside the caller's transaction. */
export function runSync<T>(rule: Rule<T>): T {
  const step = rule.next();
  if (!step.done) throw new Error('a pool rule waited for I/O inside a synchronous transaction');
  return step.value;
}

/** Runs a rule whose primitives wait for queries (PostgreSQL); errors reach the rule's own try blocks. */
export async function runAsync<T>(rule: Rule<T>): Promise<T> {
  let step = rule.next();
  while (!step.done) {
    let value: unknown;
    try {
      value = await step.value;
    } catch (error) {
      step = rule.throw(error);
      continue;
    }
    step = rule.next(value);
  }
  return step.value;
}
