import type { EventType, PoolEvent } from '../domain/index.js';
import type { EventQuery } from '../store/types.js';

/*
 * What happened in a channel under each policy version (docs/datapool.md#the-report-per-version):
 * prompts the scheduler handed out, groups that became ready and that were dropped (by reason), and
 * how long trainers waited for each batch. Read from the event log, whose version changes mark the
 * boundaries: nothing is counted twice to keep it.
 */

export interface VersionReport {
  version: number;
  prompts_handed: number;
  groups_ready: number;
  groups_dropped: Record<string, number>;
  batches_leased: number;
  /** From a trainer's lease request to its batch being served (ms); null with no batch. */
  batch_fill_ms: { p50: number; max: number } | null;
}

const CHANNEL_EVENTS: EventType[] = ['prompts_handed', 'group_ready', 'group_dropped', 'batch_leased'];
const PAGE = 1000;

/** Reads every event of a query, page by page. */
async function readAll(
  read: (query: EventQuery) => Promise<PoolEvent[]>,
  query: Omit<EventQuery, 'after' | 'limit'>,
) {
  const out: PoolEvent[] = [];
  for (let after = 0; ; ) {
    const page = await read({ ...query, after, limit: PAGE });
    out.push(...page);
    if (page.length < PAGE) return out;
    after = page.at(-1)!.seq;
  }
}

/** The channel's report, one row per policy version in force while anything of it happened. */
export async function versionReport(
  read: (query: EventQuery) => Promise<PoolEvent[]>,
  channel: string,
): Promise<VersionReport[]> {
  const switches = await readAll(read, { types: ['policy_version_changed'] });
  const events = await readAll(read, { channel, types: CHANNEL_EVENTS });
  const rows = new Map<number, VersionReport & { fills: number[] }>();
  let s = 0;
  let version = 0;
  for (const event of events) {
    // The version in force at this event: the last switch logged before it.
    while (s < switches.length && switches[s]!.seq < event.seq) version = Number(switches[s++]!.data.version);
    let row = rows.get(version);
    if (!row) {
      row = {
        version,
        prompts_handed: 0,
        groups_ready: 0,
        groups_dropped: {},
        batches_leased: 0,
        batch_fill_ms: null,
        fills: [],
      };
      rows.set(version, row);
    }
    const data = event.data as Record<string, unknown>;
    if (event.type === 'prompts_handed') row.prompts_handed += Number(data.count ?? 0);
    else if (event.type === 'group_ready') row.groups_ready += 1;
    else if (event.type === 'group_dropped') {
      const reason = String(data.reason);
      row.groups_dropped[reason] = (row.groups_dropped[reason] ?? 0) + 1;
    } else if (event.type === 'batch_leased') {
      row.batches_leased += 1;
      if (typeof data.fill_ms === 'number') row.fills.push(data.fill_ms);
    }
  }
  return [...rows.values()]
    .sort((a, b) => a.version - b.version)
    .map(({ fills, ...row }) => {
      const sorted = fills.sort((a, b) => a - b);
      return {
        ...row,
        batch_fill_ms:
          sorted.length === 0 ? null : { p50: sorted[(sorted.length - 1) >> 1]!, max: sorted.at(-1)! },
      };
    });
}
