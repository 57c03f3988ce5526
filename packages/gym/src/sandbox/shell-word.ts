/** Single-quotes a string for POSIX shells. */
export function shellWord(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}
