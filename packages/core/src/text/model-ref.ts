import { createModelAdapter, type ModelAdapter, qwen3Adapter } from './model-adapter.js';

/*
 * Which model a step's tokens belong to, as a value that crosses threads: the model folder the
 * operator configured for the engine that produced it (and its family when named). Null is the
 * built-in Qwen3. Every text feature asks a ModelAdapters for the adapter of the step's ref.
 */

export interface ModelRef {
  /** The model folder (`--engine ...,model-dir=DIR`): operator configuration, never request data. */
  dir: string;
  /** The family named with `,family=NAME`; detected from the folder when absent. */
  family?: string;
}

const keyOf = (ref: ModelRef) => `${ref.family ?? ''}\u0000${ref.dir}`;

/** Adapters by model ref, each built once (a tokenizer is seconds of CPU and tens of MB). */
export class ModelAdapters {
  private readonly adapters = new Map<string, ModelAdapter>();
  private builtIn: ModelAdapter | undefined;

  of(ref: ModelRef | null | undefined): ModelAdapter {
    if (!ref) {
      this.builtIn ??= qwen3Adapter();
      return this.builtIn;
    }
    const key = keyOf(ref);
    let adapter = this.adapters.get(key);
    if (!adapter) {
      adapter = createModelAdapter(ref.dir, ref.family === undefined ? {} : { family: ref.family });
      this.adapters.set(key, adapter);
    }
    return adapter;
  }
}
