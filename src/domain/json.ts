import { z } from 'zod';

/** A JSON object as it crosses a boundary: keys are strings, values anything JSON can hold. */
export const JsonObject = z.record(z.string(), z.unknown());
export type JsonObject = z.infer<typeof JsonObject>;
