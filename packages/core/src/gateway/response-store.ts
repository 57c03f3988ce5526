import type { ChatMessage } from './responses-request.js';

/*
 * The conversations of stored Responses (`store` not false), for `previous_response_id`: kept per
 * trajectory, so a response id names nothing outside the trajectory that made it, in this process's
 * memory only (a cache an agent can always do without: it may send the whole input instead).
 * Bounded: a trajectory keeps its latest responses, all trajectories together a byte budget (least
 * recently used trajectories go first), and a completed trajectory's are dropped.
 */

export interface ResponseStoreOptions {
  /** Responses kept per trajectory, the latest (default 64). */
  perTrajectory?: number;
  /** What all kept conversations may take, estimated from the calls' text (default 256 MiB). */
  maxBytes?: number;
}

interface Kept {
  conversation: readonly ChatMessage[];
  bytes: number;
}

export class ResponseStore {
  /** Trajectory → its responses, both in order of use (a Map keeps insertion order). */
  private readonly kept = new Map<string, Map<string, Kept>>();
  private bytes = 0;
  private readonly perTrajectory: number;
  private readonly maxBytes: number;

  constructor(options: ResponseStoreOptions = {}) {
    this.perTrajectory = options.perTrajectory ?? 64;
    this.maxBytes = options.maxBytes ?? 256 * 1024 * 1024;
  }

  /** Keeps a response's conversation (its input and output, instructions left out). */
  put(trajectory: string, id: string, conversation: readonly ChatMessage[], bytes: number): void {
    const responses = this.kept.get(trajectory) ?? new Map<string, Kept>();
    this.kept.delete(trajectory);
    this.kept.set(trajectory, responses);
    responses.set(id, { conversation, bytes });
    this.bytes += bytes;
    while (responses.size > this.perTrajectory) this.evictOldest(trajectory, responses);
    for (const [name, oldest] of this.kept) {
      if (this.bytes <= this.maxBytes) break;
      // The latest response of the trajectory just used is kept, whatever its size.
      while (this.bytes > this.maxBytes && oldest.size > (name === trajectory ? 1 : 0))
        this.evictOldest(name, oldest);
    }
  }

  /** A kept response's conversation, if `trajectory` made it; null for any other id. */
  get(trajectory: string, id: string): readonly ChatMessage[] | null {
    const responses = this.kept.get(trajectory);
    const found = responses?.get(id);
    if (!responses || !found) return null;
    // Used again: the least recently used trajectories are the ones dropped.
    this.kept.delete(trajectory);
    this.kept.set(trajectory, responses);
    return found.conversation;
  }

  /** Forgets a trajectory's responses (it completed). */
  drop(trajectory: string): void {
    const responses = this.kept.get(trajectory);
    if (!responses) return;
    for (const r of responses.values()) this.bytes -= r.bytes;
    this.kept.delete(trajectory);
  }

  /** Responses kept, and their estimated bytes. */
  stats(): { responses: number; bytes: number } {
    let responses = 0;
    for (const r of this.kept.values()) responses += r.size;
    return { responses, bytes: this.bytes };
  }

  private evictOldest(trajectory: string, responses: Map<string, Kept>): void {
    const [id, oldest] = responses.entries().next().value!;
    responses.delete(id);
    this.bytes -= oldest.bytes;
    if (responses.size === 0) this.kept.delete(trajectory);
  }
}
