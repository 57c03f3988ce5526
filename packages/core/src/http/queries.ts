import { z } from 'zod';
import { Quality } from '../domain/index.js';

/** Query fields several list routes share. */

export const optionalNumber = z.coerce.number().finite().optional();

export const queryBoolean = z
  .enum(['true', 'false'])
  .transform((v) => v === 'true')
  .optional();

export const Pagination = {
  limit: z.coerce.number().int().min(1).max(500).default(50),
  offset: z.coerce
    .number()
    .int()
    .min(0)
    .max(1_000_000, 'must be <= 1000000 (narrow the filters instead)')
    .default(0),
};

export const LabelQuery = {
  trainable: queryBoolean,
  quality: Quality.optional(),
  label: z.string().min(1).max(64).optional(),
};
