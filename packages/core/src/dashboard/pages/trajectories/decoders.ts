import type { JsonObject } from '../../../domain/json.js';
import { offload } from '../../../services/offload.js';
import type { ModelRef } from '../../../text/model-ref.js';
import {
  BUILT_IN_MODEL,
  describeModel,
  recordedModel,
  type ServedModel,
  servedModelOf,
} from '../../../text/step-model.js';
import { decodeWithTable, type TokenTable } from '../../../text/token-table.js';

/*
 * One decoding table per model the server's engines serve (and the built-in Qwen3), each built once
 * on the offload thread: a tokenizer takes most of a second to load, which would hold the event loop
 * (docs/security.md). A step's ids decode with the table of the model it records; ids of a model this
 * server does not serve are shown as ids with a note naming it, never read with another vocabulary.
 */

/** How the token views read one step's ids. */
export interface StepDecoder {
  /** The model's name, for the page ("decoded with ..."). */
  readonly model: string;
  /** Why the ids are shown undecoded; null when they decode. */
  readonly note: string | null;
  /** The ids' text; an id outside the vocabulary answers a marker instead of failing the page. */
  decode(ids: readonly number[]): string;
  /** One token's text (U+FFFD outside the vocabulary). */
  token(id: number): string;
}

const refKey = (ref: ModelRef | null) => (ref ? `${ref.family ?? ''}\u0000${ref.dir}` : '');

/** Ids shown as they are, when no table of their vocabulary is at hand. */
function undecoded(model: string, note: string): StepDecoder {
  return { model, note, decode: (ids) => ids.join(' '), token: (id) => `#${id}` };
}

function tableDecoder(model: string, table: TokenTable): StepDecoder {
  return {
    model,
    note: null,
    decode(ids) {
      try {
        return decodeWithTable(table, ids);
      } catch {
        return `[${ids.length} tokens outside the ${model} vocabulary]`;
      }
    },
    token(id) {
      try {
        return decodeWithTable(table, [id], { piece: true });
      } catch {
        return '\ufffd';
      }
    },
  };
}

export class TokenDecoders {
  private readonly tables = new Map<string, TokenTable>();
  private readonly failures = new Map<string, string>();
  private loading: Promise<void> | null = null;

  constructor(
    private readonly served: readonly ServedModel[],
    private readonly load: (ref: ModelRef | null) => Promise<TokenTable> = (ref) =>
      offload.call('tokenTable', ref),
  ) {}

  /**
   * Builds every served model's table off the event loop, once; pages that decode await it first
   * (mountTrajectoryPages). A table that could not be built is retried on the next page.
   */
  ready(): Promise<void> {
    const missing = [BUILT_IN_MODEL, ...this.served].filter((m) => !this.tables.has(refKey(m.ref)));
    if (missing.length === 0) return Promise.resolve();
    this.loading ??= Promise.all(
      missing.map(async (m) => {
        const key = refKey(m.ref);
        try {
          this.tables.set(key, await this.load(m.ref));
          this.failures.delete(key);
        } catch (error) {
          this.failures.set(key, (error as Error).message);
        }
      }),
    ).then(() => {
      this.loading = null;
    });
    return this.loading;
  }

  /** The decoder of the model a step records (`model_family`, `model_name`; none: the built-in Qwen3). */
  of(metadata: JsonObject | null | undefined): StepDecoder {
    const served = servedModelOf(metadata, this.served);
    if (!served) {
      const recorded = recordedModel(metadata)!;
      return undecoded(
        recorded.name,
        `token ids of ${describeModel(recorded)}, which no engine of this server serves: shown as ids, not decoded with another model's vocabulary`,
      );
    }
    const key = refKey(served.ref);
    const table = this.tables.get(key);
    if (table) return tableDecoder(served.name, table);
    const why = this.failures.get(key) ?? 'its decoding table is not loaded yet';
    return undecoded(served.name, `token ids of ${describeModel(served)}, shown as ids: ${why}`);
  }
}
