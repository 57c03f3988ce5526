import { z } from 'zod';

/*
 * A field the protocols type as "a string or an array of X" (message content, tool output). zod's
 * union would report a bad part at the field itself; this reports it at the part
 * (`input.0.content.1.type`), the field a 400 should name.
 */
export function stringOr<T extends z.ZodType>(array: T, error: string) {
  return z.unknown().transform((value, ctx): string | z.output<T> => {
    if (typeof value === 'string') return value;
    if (!Array.isArray(value)) {
      ctx.addIssue({ code: 'custom', message: error });
      return z.NEVER;
    }
    const parsed = array.safeParse(value);
    if (parsed.success) return parsed.data;
    for (const issue of parsed.error.issues) ctx.addIssue(issue as Parameters<typeof ctx.addIssue>[0]);
    return z.NEVER;
  });
}
