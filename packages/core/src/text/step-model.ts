import type { JsonObject } from '../domain/json.js';
import type { ModelRef } from './model-ref.js';

/*
 * Which model a stored step's ids belong to: the gateway records the routed engine's model
 * (`model_family`, `model_name`) in each step's metadata; a step without them came from an engine
 * with no model folder, the built-in Qwen3. A reader of stored ids resolves that record against the
 * models its server's engines serve, and says so, naming the model, when none of them is it.
 */

/** A step's model as its metadata records it. */
export interface RecordedModel {
  family: string;
  name: string;
}

/** The model a step records; null when it records none (the built-in Qwen3). */
export function recordedModel(metadata: JsonObject | null | undefined): RecordedModel | null {
  const family = metadata?.model_family;
  const name = metadata?.model_name;
  if (typeof family !== 'string' || typeof name !== 'string') return null;
  return { family, name };
}

/** A model this server's engines serve: its folder (null: the built-in Qwen3) and how steps name it. */
export interface ServedModel {
  ref: ModelRef | null;
  family: string;
  name: string;
}

/** The built-in model, as the adapter names it. */
export const BUILT_IN_MODEL: ServedModel = { ref: null, family: 'qwen3', name: 'Qwen3' };

/**
 * The served model a step's ids belong to: the built-in one when the step records none, else the
 * served model of the same family and name; undefined when no engine here serves it.
 */
export function servedModelOf(
  metadata: JsonObject | null | undefined,
  served: readonly ServedModel[],
): ServedModel | undefined {
  const recorded = recordedModel(metadata);
  if (!recorded) return BUILT_IN_MODEL;
  return served.find((m) => m.ref !== null && m.family === recorded.family && m.name === recorded.name);
}

/** A model's name and family for a note ("model X (family F)"). */
export const describeModel = (m: RecordedModel) => `model ${m.name} (family ${m.family})`;
