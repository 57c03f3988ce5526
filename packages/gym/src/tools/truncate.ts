/**
 * `text` cut to at most `max` characters (notice included): its head and its tail (where errors and
 * results usually are), with a notice saying how much was left out in between.
 */
export function clipMiddle(text: string, max: number): { text: string; truncated: boolean } {
  if (text.length <= max) return { text, truncated: false };
  const notice = (n: number) => `\n[... ${n} characters truncated ...]\n`;
  const room = Math.max(0, max - notice(text.length).length);
  const head = Math.floor(room * 0.3);
  const tail = room - head;
  const omitted = text.length - head - tail;
  return { text: text.slice(0, head) + notice(omitted) + text.slice(text.length - tail), truncated: true };
}

/** Splits `room` characters between two texts: each gets half, and what one does not need goes to the other. */
export function shareRoom(a: number, b: number, room: number): [number, number] {
  if (a + b <= room) return [a, b];
  const half = Math.floor(room / 2);
  if (a <= half) return [a, room - a];
  if (b <= half) return [room - b, b];
  return [half, room - half];
}
