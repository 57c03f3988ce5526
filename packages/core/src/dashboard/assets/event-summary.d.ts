/** Types for event-summary.js (plain JS: the browser loads it as it is). */

export type SummarySegment = string | { text: string; href: string; title: string };

export interface SummarizedEvent {
  type: string;
  channel: string | null;
  data: Record<string, unknown>;
}

export function eventSummary(event: SummarizedEvent): SummarySegment[];
export function eventSource(event: SummarizedEvent): string | null;
export function formatTime(ts: number): string;
