import { contentText } from '../text/content.js';

// Implicit feedback: the user's next message read as thanks or a correction, deliberately narrow (no match
// records nothing). Rules and precedence: docs/gateway.md#implicit-feedback

export type FeedbackKind = 'thanks' | 'correction';

/** OpenClaw appends this message to every call: context for the model, not the user speaking. */
export const OPENCLAW_INTERNAL_MARKER = '<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>';

/** OpenClaw prefixes user messages with the time (`[Thu 2026-12-03 05:31 UTC] `). */
const TIMESTAMP_PREFIX =
  /^\s*\[[A-Z][a-z]{2} \d{4}-\d{2}-\d{2} \d{1,2}:\d{2}(?::\d{2})?(?: [A-Za-z]{1,5}[+-]?\d*)?\]\s*/;
/** ...and may append the runtime description to the first one. */
const RUNTIME_SUFFIX = /\n\s*\nRuntime:[\s\S]*$/;

/** Negative-looking phrases that are not complaints; removed before the correction rules run. */
const BENIGN = [
  /\bno (?:problem|prob|worries|worry|rush|stress|biggie)\b/g,
  /\bno,? thanks?(?: you)?\b/g,
  /\bno need\b/g,
  /\bnot bad\b/g,
  /\bnothing(?:'s| is)? wrong\b/g,
  /\bnot wrong\b/g,
  /\bif (?:it|that|this) (?:doesn't|does not|didn't|did not) work\b/g,
];

const CORRECTION = [
  /^(?:no|nope|nah)\b/,
  /\b(?:that'?s|that is|this is|it'?s|it is|you'?re|you are|still|completely|totally|all) (?:wrong|incorrect)\b/,
  /^(?:wrong|incorrect)\b/,
  /\bwrong (?:answer|file|one|again|place|command|thing|way|output|result|function|directory|folder)\b/,
  /\bnot what i (?:asked|wanted|meant|said|need|needed)\b/,
  /\b(?:that'?s|this is|it'?s|that is|it is) not (?:it|right|correct|what)\b/,
  /\b(?:isn'?t|is not) (?:right|correct|what i)\b/,
  /^(?:please )?(?:undo|revert|roll ?back)\b/,
  /\b(?:undo|revert|roll ?back) (?:that|this|it|your|those|these|the (?:last|change|changes|edit|edits))\b/,
  /\byou (?:broke|messed up|deleted|removed|ignored|forgot|missed)\b/,
  /\byou(?:'ve| have) (?:broken|broke|messed up|deleted|removed|ignored|forgotten|missed)\b/,
  /\b(?:it'?s|it is|that'?s|everything is|now it'?s) broken\b/,
  /\bbroke (?:it|the|my|everything)\b/,
  /\bstill (?:fail|failing|fails|broken|not|doesn'?t|does not|wrong|the same|erroring|errors|crash|crashing|getting)\b/,
  /\b(?:doesn'?t|does not|didn'?t|did not) (?:work|compile|run|help|fix)\b/,
  /\bnot working\b/,
  /\b(?:actually,? )?i meant\b/,
  /\bactually,? i (?:wanted|asked|said)\b/,
  /^stop\b/,
  /\bdon'?t do that\b/,
  /\bthanks for nothing\b/,
  /\buseless\b/,
  /👎/u,
];

const THANKS = [
  /\bthanks?\b/,
  /\bthank you\b/,
  /\b(?:thx|tysm|ty)\b/,
  /\bperfect(?:ly)?\b/,
  /\b(?:awesome|excellent|fantastic|brilliant|amazing)\b/,
  /^(?:great|nice|cool|sweet|exactly)\b/,
  /\b(?:that|it|this) works\b/,
  /\bworks (?:now|great|perfectly|fine|well)\b/,
  /\blooks (?:good|great|perfect)\b/,
  /\blgtm\b/,
  /\b(?:well|nicely) done\b/,
  /\b(?:good|great|nice) (?:job|work|catch)\b/,
  /\bappreciate(?:d)?\b/,
  /\bspot on\b/,
  /[👍🙏🙌🎉✅]|❤️/u,
];

/** The user's own words in a message's text: OpenClaw's time prefix, runtime suffix and internal context removed. */
export function userWords(text: string): string {
  const internal = text.indexOf(OPENCLAW_INTERNAL_MARKER);
  const own = internal >= 0 ? text.slice(0, internal) : text;
  return own.replace(RUNTIME_SUFFIX, '').replace(TIMESTAMP_PREFIX, '').trim();
}

/**
 * The newest real user turn in a chat request, or null. A real turn is a `user` message after the
 * last assistant message (what the user said in reaction to the agent's last answer) with words of
 * its own: OpenClaw's internal-context messages and messages without text are skipped.
 */
export function latestUserTurn(messages: readonly unknown[]): string | null {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (typeof m !== 'object' || m === null) continue;
    const { role, content } = m as { role?: unknown; content?: unknown };
    if (role === 'assistant') return null;
    if (role !== 'user') continue;
    const words = userWords(contentText(content));
    if (words !== '') return words;
  }
  return null;
}

function normalize(text: string): string {
  return text
    .toLowerCase()
    .replace(/[\u2018\u2019\u02bc]/g, "'")
    .replace(/\s+/g, ' ')
    .trim();
}

/** Classifies a user message as thanks (+1), correction (−1) or neutral (null); see the rules above. */
export function classifyFeedback(text: string): FeedbackKind | null {
  let t = normalize(text);
  for (const phrase of BENIGN) t = t.replace(phrase, ' ');
  t = t.replace(/^[\s,.;:!-]+/, '').trim();
  if (CORRECTION.some((rule) => rule.test(t))) return 'correction';
  if (THANKS.some((rule) => rule.test(t))) return 'thanks';
  return null;
}

/** At most `max` characters (whole code points), for the signal's details. */
export function excerpt(text: string, max = 200): string {
  const chars = Array.from(text);
  return chars.length <= max ? text : chars.slice(0, max).join('');
}
