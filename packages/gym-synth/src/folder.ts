import type { GymTask, TaskFile } from '@stepwise/gym';
import { CLAWGYM_ENTRY_FORMAT } from '@stepwise/gym';

/*
 * The ClawGym folder form of a check-DSL task. ClawGym's harness only knows script verifiers
 * (`reward/reward.sh` prints the score), so the checks travel as `reward/checks.json` with a
 * stdlib-only Python evaluator of the DSL (`reward/check.py`, the same rules as
 * packages/gym/src/verify/checks.ts). Persona, skills, difficulty, provenance and the reference actions go
 * into data_entry.json's `metadata`.
 */

export const CHECK_PY = String.raw`"""Check-DSL verifier of a Stepwise task (Python 3 standard library only).

Usage: python3 check.py WORKSPACE prints a JSON object of sub-scores in [0, 1], one per check of
reward/checks.json (beside this file). It follows Stepwise's packages/gym/src/verify/checks.ts.
"""
import csv
import io
import json
import os
import re
import subprocess
import sys

MAX_BYTES = 32 * 1024 * 1024


def resolve(ws, rel):
    parts = rel.split("/")
    if rel.startswith("/") or "\0" in rel or ".." in parts:
        return None
    root = os.path.realpath(ws)
    full = os.path.realpath(os.path.join(root, *parts))
    if full != root and not full.startswith(root + os.sep):
        return None
    return full


def read_text(ws, rel):
    full = resolve(ws, rel)
    if full is None or not os.path.isfile(full) or os.path.getsize(full) > MAX_BYTES:
        raise ValueError("unreadable: " + rel)
    with open(full, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return text


def read_json(ws, rel):
    text = read_text(ws, rel)
    return json.loads(text[1:] if text.startswith("\ufeff") else text)


def read_csv(ws, rel):
    text = read_text(ws, rel)
    if text.startswith("\ufeff"):
        text = text[1:]
    rows = [r for r in csv.reader(io.StringIO(text, newline=""), strict=True) if r]
    if not rows:
        raise ValueError("no header row")
    header = rows[0]
    if any(len(r) != len(header) for r in rows[1:]):
        raise ValueError("ragged rows")
    return header, rows[1:]


def resolve_pointer(doc, pointer):
    if pointer == "":
        return True, doc
    if not pointer.startswith("/"):
        raise ValueError("bad pointer")
    value = doc
    for token in pointer[1:].split("/"):
        if re.search(r"~[^01]|~$", token):
            raise ValueError("bad pointer")
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, list):
            if not re.fullmatch(r"0|[1-9][0-9]*", token) or int(token) >= len(value):
                return False, None
            value = value[int(token)]
        elif isinstance(value, dict) and token in value:
            value = value[token]
        else:
            return False, None
    return True, value


def is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def json_equals(actual, expected, tol):
    if is_number(actual) and is_number(expected):
        return actual == expected or abs(actual - expected) <= tol
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(
            json_equals(a, e, tol) for a, e in zip(actual, expected))
    if isinstance(expected, dict):
        return isinstance(actual, dict) and len(actual) == len(expected) and all(
            k in actual and json_equals(actual[k], v, tol) for k, v in expected.items())
    return type(actual) is type(expected) and actual == expected


def lcs(a, b):
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, 1):
            cur[j] = prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1])
        prev = cur
    return prev[len(b)]


def rows_score(actual, expected, ordered):
    def key(row):
        return json.dumps([v.strip() for v in row])
    a = [key(r) for r in actual]
    e = [key(r) for r in expected]
    denominator = max(len(a), len(e))
    if denominator == 0:
        return 1.0
    if ordered:
        matched = lcs(a, e)
    else:
        counts = {}
        for k in a:
            counts[k] = counts.get(k, 0) + 1
        matched = 0
        for k in e:
            if counts.get(k, 0) > 0:
                matched += 1
                counts[k] -= 1
    return matched / denominator


def evaluate(check, ws):
    kind = check["kind"]
    if kind == "file_exists":
        full = resolve(ws, check["path"])
        return 1.0 if full is not None and os.path.exists(full) else 0.0
    if kind == "file_absent":
        full = resolve(ws, check["path"])
        return 1.0 if full is not None and not os.path.lexists(os.path.join(ws, check["path"])) else 0.0
    if kind == "parses":
        (read_json if check["format"] == "json" else read_csv)(ws, check["path"])
        return 1.0
    if kind == "csv_columns":
        header, _ = read_csv(ws, check["path"])
        got = [h.strip() for h in header]
        want = [c.strip() for c in check["columns"]]
        same = got == want if check.get("ordered", True) else sorted(got) == sorted(want)
        return 1.0 if same else 0.0
    if kind == "json_keys":
        value = read_json(ws, check["path"])
        return 1.0 if isinstance(value, dict) and all(k in value for k in check["keys"]) else 0.0
    if kind == "json_value":
        found, value = resolve_pointer(read_json(ws, check["path"]), check["pointer"])
        return 1.0 if found and json_equals(value, check.get("expected"), check.get("tolerance", 1e-6)) else 0.0
    if kind == "rows_match":
        header, rows = read_csv(ws, check["path"])
        header = [h.strip() for h in header]
        wanted = [c.strip() for c in check["columns"]]
        if any(c not in header for c in wanted):
            return 0.0
        idx = [header.index(c) for c in wanted]
        return rows_score([[r[i] for i in idx] for r in rows], check["expected"], check.get("ordered", False))
    if kind == "text_contains":
        text = read_text(ws, check["path"])
        if check.get("regex", False):
            found = re.search(check["pattern"], text, re.I if check.get("ignoreCase") else 0) is not None
        elif check.get("ignoreCase"):
            found = check["pattern"].lower() in text.lower()
        else:
            found = check["pattern"] in text
        return 1.0 if found != check.get("absent", False) else 0.0
    if kind == "word_count":
        words = len(read_text(ws, check["path"]).split())
        low, high = check.get("min"), check.get("max")
        return 1.0 if (low is None or words >= low) and (high is None or words <= high) else 0.0
    if kind == "command":
        try:
            done = subprocess.run(["bash", "-c", check["command"]], cwd=ws, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=check.get("timeoutMs", 60000) / 1000)
        except subprocess.TimeoutExpired:
            return 0.0
        return 1.0 if done.returncode == check.get("exitCode", 0) else 0.0
    raise ValueError("unknown check kind: " + kind)


def main(ws):
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "checks.json"), encoding="utf-8") as f:
        checks = json.load(f)
    scores = {}
    for check in checks:
        key, n = check["name"], 2
        while key in scores:
            key, n = check["name"] + "#" + str(n), n + 1
        try:
            scores[key] = min(1.0, max(0.0, float(evaluate(check, ws))))
        except Exception:
            scores[key] = 0.0
    print(json.dumps(scores))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.getcwd())
`;

export const REWARD_SH = `#!/usr/bin/env bash
set -euo pipefail

here="$(cd "$(dirname "\${BASH_SOURCE[0]}")" && pwd)"
python3 "$here/check.py" "$(dirname "$here")" | python3 -c 'import json, sys; d = json.load(sys.stdin); print(sum(d.values()) / len(d) if d else 0.0)'
`;

/** The task with its check DSL carried by a script verifier (`reward/`), ready for the ClawGym folder form. */
export function toClawGymTask(task: GymTask): GymTask {
  if (task.verifier.kind !== 'checks') return task;
  const checks = task.verifier.checks;
  const files: TaskFile[] = [
    { path: 'reward/reward.sh', encoding: 'utf8', content: REWARD_SH, mode: 0o755 },
    { path: 'reward/check.py', encoding: 'utf8', content: CHECK_PY },
    { path: 'reward/checks.json', encoding: 'utf8', content: `${JSON.stringify(checks, null, 2)}\n` },
  ];
  const commandMs = checks.reduce((s, c) => s + (c.kind === 'command' ? c.timeoutMs : 0), 0);
  const metadata = {
    category: task.category,
    grading_type: 'automated',
    persona: task.persona,
    skills: task.skills,
    difficulty: task.difficulty,
    reference_actions: task.referenceActions,
    stepwise: task.provenance,
  };
  return {
    ...task,
    verifier: {
      kind: 'script',
      files,
      entry: 'reward/reward.sh',
      timeoutMs: Math.min(3_600_000, 60_000 + commandMs),
    },
    provenance: {
      ...task.provenance,
      clawgym: {
        entryKeys: ['task_id', 'user_query', 'input_mount_dir', 'metadata'],
        extra: {},
        metadata,
        format: CLAWGYM_ENTRY_FORMAT,
        inputDir: true,
        emptyDirs: [],
        otherFiles: [],
      },
    },
  };
}
