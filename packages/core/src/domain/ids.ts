import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { parseOrThrow } from './errors.js';

/** 128 random bits, hex: trajectory ids are capabilities (holding one lets you write to it). */
export function newTrajectoryId(): string {
  return randomBytes(16).toString('hex');
}

export function newLeaseId(): string {
  return `lease_${randomBytes(12).toString('hex')}`;
}

/** Ids chosen by clients (Claw-R1 sends uuid4 strings): printable, bounded, safe in URLs. */
export const ClientId = z
  .string()
  .min(1, 'must not be empty')
  .max(128, 'must be at most 128 characters')
  .regex(/^[A-Za-z0-9._:-]+$/, 'may contain only letters, digits and . _ : -');

const VALID_CLIENT_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** A ClientId from a URL path: checked without the schema on the hot path, its messages on failure. */
export function clientIdParam(value: string | undefined, field: string): string {
  if (value !== undefined && VALID_CLIENT_ID.test(value)) return value;
  return parseOrThrow(ClientId, value, field);
}

export const ChannelName = z
  .string()
  .min(1, 'must not be empty')
  .max(64, 'must be at most 64 characters')
  .regex(
    /^[A-Za-z0-9][A-Za-z0-9_.-]*$/,
    'must start with a letter or digit and contain only letters, digits and _ . -',
  );
