import { byString, lineRegex, pyFixed, shellQuote, slugify, toCsv } from '../format.js';
import type { Rng } from '../rng.js';
import {
  act,
  type CheckInput,
  check,
  family,
  givenNames,
  type TaskTemplate,
  type TemplateContext,
} from '../template.js';

const CATEGORY = 'Software Development' as const;

/** A command check that runs Python assertions from the workspace root. */
function pythonAsserts(name: string, lines: readonly string[]): CheckInput {
  return check.command(name, `python3 -c ${shellQuote(lines.join('\n'))}`);
}

const UNITTEST = 'python3 -m unittest discover -s tests -v';

/*
 * A small module with one planted bug: the buggy source, the line that fixes it, a visible unittest
 * that fails on the bug, and hidden assertions (drawn here) that the fixed code passes.
 */
interface BugCase {
  module: string;
  /** Whether every reasonable fix must change \`buggyLine\` (a median fix may add lines around it instead). */
  lineMustChange: boolean;
  func: string;
  symptom: string;
  source: string;
  buggyLine: string;
  fixedLine: string;
  tests: string;
  hidden: string[];
}

function header(doc: string): string {
  return `"""${doc}"""\n`;
}

function medianBug(ctx: TemplateContext): BugCase {
  const { rng, persona } = ctx;
  const odd = Array.from({ length: 5 }, () => rng.int(1, 90));
  let even: number[];
  do even = Array.from({ length: 4 }, () => rng.int(1, 90));
  while (new Set([...even].sort((a, b) => a - b).slice(1, 3)).size < 2);
  const med = (xs: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    const m = s.length >> 1;
    return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
  };
  const hiddenLists = Array.from({ length: 4 }, (_, i) =>
    Array.from({ length: 2 + i * 2 }, () => rng.int(-50, 200)),
  );
  return {
    module: 'report_stats',
    lineMustChange: false,
    func: 'median',
    symptom: `the weekly ${persona.items[0]!.toLowerCase()} report shows the wrong median whenever there is an even number of values`,
    source: `${header(`Summary statistics for the ${persona.org} weekly report.`)}

def mean(values):
    if not values:
        raise ValueError("no values")
    return sum(values) / len(values)


def median(values):
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid]
`,
    buggyLine: '    return ordered[mid]\n',
    fixedLine: '    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2\n',
    tests: `import unittest

from report_stats import mean, median


class ReportStatsTest(unittest.TestCase):
    def test_mean(self):
        self.assertAlmostEqual(mean(${JSON.stringify(odd)}), ${odd.reduce((a, b) => a + b, 0)} / ${odd.length})

    def test_median_odd(self):
        self.assertEqual(median(${JSON.stringify(odd)}), ${med(odd)})

    def test_median_even(self):
        self.assertEqual(median(${JSON.stringify(even)}), ${med(even)})

    def test_median_empty(self):
        with self.assertRaises(ValueError):
            median([])


if __name__ == "__main__":
    unittest.main()
`,
    hidden: [
      'from report_stats import median',
      ...hiddenLists.map((xs) => `assert median(${JSON.stringify(xs)}) == ${med(xs)}, ${JSON.stringify(xs)}`),
    ],
  };
}

function leapBug(ctx: TemplateContext): BugCase {
  const { rng, persona } = ctx;
  const century400 = rng.pick([1600, 2000, 2400]);
  const leap = (y: number) => (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
  const years = [
    century400 + 400,
    rng.pick([1700, 1800, 1900, 2100]),
    ...Array.from({ length: 6 }, () => rng.int(1800, 2200)),
  ];
  return {
    module: 'booking_dates',
    lineMustChange: true,
    func: 'is_leap_year',
    symptom: `the ${persona.org} booking calendar refuses February 29 in ${century400}`,
    source: `${header(`Date helpers for the ${persona.org} booking calendar.`)}
DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def is_leap_year(year):
    return year % 4 == 0 and year % 100 != 0


def days_in_month(year, month):
    if not 1 <= month <= 12:
        raise ValueError("month must be 1-12")
    if month == 2 and is_leap_year(year):
        return 29
    return DAYS[month - 1]
`,
    buggyLine: '    return year % 4 == 0 and year % 100 != 0\n',
    fixedLine: '    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n',
    tests: `import unittest

from booking_dates import days_in_month, is_leap_year


class BookingDatesTest(unittest.TestCase):
    def test_common_years(self):
        self.assertEqual(days_in_month(2023, 2), 28)
        self.assertEqual(days_in_month(1900, 2), 28)

    def test_leap_years(self):
        self.assertEqual(days_in_month(2024, 2), 29)
        self.assertTrue(is_leap_year(${century400}))

    def test_other_months(self):
        self.assertEqual(days_in_month(2024, 4), 30)
        with self.assertRaises(ValueError):
            days_in_month(2024, 13)


if __name__ == "__main__":
    unittest.main()
`,
    hidden: [
      'from booking_dates import is_leap_year, days_in_month',
      ...years.map((y) => `assert is_leap_year(${y}) is ${leap(y) ? 'True' : 'False'}, ${y}`),
      `assert days_in_month(${century400 + 400}, 2) == 29`,
    ],
  };
}

function pagingBug(ctx: TemplateContext): BugCase {
  const { rng, persona } = ctx;
  const per = rng.pick([10, 12, 20, 25]);
  const k = rng.int(2, 9);
  const cases = Array.from({ length: 6 }, () => [rng.int(0, 500), rng.pick([1, 3, 7, 10, 50])] as const);
  return {
    module: 'paging',
    lineMustChange: true,
    func: 'page_count',
    symptom: `the last page of the ${persona.items[1]!.toLowerCase()} listing disappears when the count is not a multiple of the page size`,
    source: `${header(`Pagination for the ${persona.org} listing pages.`)}

def page_count(total, per_page):
    if per_page < 1:
        raise ValueError("per_page must be positive")
    return total // per_page


def page_slice(items, page, per_page):
    """The items of 1-based page \`page\`."""
    start = (page - 1) * per_page
    return items[start:start + per_page]
`,
    buggyLine: '    return total // per_page\n',
    fixedLine: '    return (total + per_page - 1) // per_page\n',
    tests: `import unittest

from paging import page_count, page_slice


class PagingTest(unittest.TestCase):
    def test_exact_pages(self):
        self.assertEqual(page_count(${per * k}, ${per}), ${k})

    def test_partial_last_page(self):
        self.assertEqual(page_count(${per * k + 1}, ${per}), ${k + 1})

    def test_empty(self):
        self.assertEqual(page_count(0, ${per}), 0)

    def test_slice(self):
        self.assertEqual(page_slice(list(range(7)), 2, 3), [3, 4, 5])


if __name__ == "__main__":
    unittest.main()
`,
    hidden: [
      'from paging import page_count',
      ...cases.map(([t, p]) => `assert page_count(${t}, ${p}) == ${Math.ceil(t / p)}, (${t}, ${p})`),
      `assert page_count(${per * k - 1}, ${per}) == ${k}`,
    ],
  };
}

function pricingBug(ctx: TemplateContext): BugCase {
  const { rng, persona } = ctx;
  const t1 = rng.pick([20000, 25000, 30000]);
  const t2 = rng.pick([5000, 8000, 10000]);
  const r1 = rng.pick([10, 12, 15]);
  const r2 = rng.pick([3, 5]);
  const rate = (c: number) => (c >= t1 ? r1 : c >= t2 ? r2 : 0);
  const price = (c: number) => c - Math.floor((c * rate(c)) / 100);
  const probes = [t1, t2, t1 - 1, t2 + 1, rng.int(0, t2 - 1), rng.int(t1, 3 * t1)];
  return {
    module: 'pricing',
    lineMustChange: true,
    func: 'discount_rate',
    symptom: `customers spending exactly ${pyFixed(t2 / 100, 2)} or ${pyFixed(t1 / 100, 2)} at ${persona.org} don't get the advertised discount`,
    source: `${header(`Volume discounts for ${persona.org} orders (amounts in cents).`)}
# (threshold in cents, discount in percent): a total of at least the threshold gets the discount.
TIERS = [(${t1}, ${r1}), (${t2}, ${r2})]


def discount_rate(total_cents):
    for threshold, rate in TIERS:
        if total_cents > threshold:
            return rate
    return 0


def final_price(total_cents):
    return total_cents - total_cents * discount_rate(total_cents) // 100
`,
    buggyLine: '        if total_cents > threshold:\n',
    fixedLine: '        if total_cents >= threshold:\n',
    tests: `import unittest

from pricing import discount_rate, final_price


class PricingTest(unittest.TestCase):
    def test_no_discount(self):
        self.assertEqual(discount_rate(${t2 - 1}), 0)

    def test_threshold_counts(self):
        self.assertEqual(discount_rate(${t2}), ${r2})
        self.assertEqual(discount_rate(${t1}), ${r1})

    def test_final_price(self):
        self.assertEqual(final_price(${t1 + 100}), ${price(t1 + 100)})


if __name__ == "__main__":
    unittest.main()
`,
    hidden: [
      'from pricing import final_price, discount_rate',
      ...probes.map((c) => `assert final_price(${c}) == ${price(c)}, ${c}`),
    ],
  };
}

function slugBug(ctx: TemplateContext): BugCase {
  const { rng, persona } = ctx;
  const titles = rng
    .sample(persona.items, 4)
    .map((t) => `${rng.pick(['', '  ', '*', '~ '])}${t}${rng.pick(['!', ' ', '...', ' (new)', '?'])}`);
  return {
    module: 'slugs',
    lineMustChange: true,
    func: 'slugify',
    symptom: `some ${persona.org} page URLs come out with stray hyphens at the start or end`,
    source: `${header(`URL slugs for the ${persona.org} website.`)}
import re


def slugify(title):
    """Lower-case words of \`title\` joined by single hyphens, e.g. "Spring Sale!" -> "spring-sale"."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower())
`,
    buggyLine: '    return re.sub(r"[^a-z0-9]+", "-", title.lower())\n',
    fixedLine: '    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")\n',
    tests: `import unittest

from slugs import slugify


class SlugTest(unittest.TestCase):
    def test_words(self):
        self.assertEqual(slugify("Hello World"), "hello-world")

    def test_punctuation_at_the_ends(self):
        self.assertEqual(slugify("  Spring Sale! "), "spring-sale")


if __name__ == "__main__":
    unittest.main()
`,
    hidden: [
      'from slugs import slugify',
      ...titles.map(
        (t) => `assert slugify(${JSON.stringify(t)}) == ${JSON.stringify(slugify(t))}, ${JSON.stringify(t)}`,
      ),
    ],
  };
}

const BUGS = [medianBug, leapBug, pagingBug, pricingBug, slugBug];

const fixBug = family({
  id: 'software.fix-bug',
  category: CATEGORY,
  summary:
    'find and fix a planted bug in a small Python module so its unittest suite (and hidden cases) pass',
  difficulty: 'medium',
  skills: ['python', 'debugging', 'unit tests'],
  draw(ctx) {
    const bug = ctx.rng.pick(BUGS)(ctx);
    return {
      bug,
      reporter: givenNames(ctx.rng, 1)[0],
      modulePath: `${bug.module}.py`,
      testPath: `tests/test_${bug.module}.py`,
      notePath: 'output/FIX.md',
    };
  },
  prompt: ({ bug, reporter, modulePath, testPath, notePath }, { persona }) => ({
    opening: `${persona.intro}. ${reporter} reported a bug in one of our helper scripts: ${bug.symptom}. The code is ${modulePath} and its tests are in tests/.`,
    inputs: [
      [modulePath, 'the module (fix it in place)'],
      [testPath, 'the unit tests (do not change them)'],
    ],
    steps: [
      `Run the tests (\`${UNITTEST}\` from the workspace root) and find the cause.`,
      'Fix the bug with the smallest change to the module; keep the function names and signatures.',
      `Write a short note saying which function was wrong and why (mention the function name, ${bug.func}).`,
    ],
    outputs: [[notePath, 'the fix note (Markdown)']],
    notes: [
      'The tests must pass afterwards, and the fix must be general (other inputs will be checked too).',
    ],
  }),
  files: ({ bug, modulePath, testPath }) => [
    { path: modulePath, content: bug.source },
    { path: testPath, content: bug.tests },
  ],
  checks: ({ bug, modulePath, notePath }) => [
    check.command('unit_tests_pass', UNITTEST),
    pythonAsserts('hidden_cases_pass', bug.hidden),
    ...(bug.lineMustChange ? [check.gone('buggy_line_replaced', modulePath, bug.buggyLine)] : []),
    check.nonEmpty('fix_note_exists', notePath),
    check.contains('fix_note_names_function', notePath, bug.func),
  ],
  reference: ({ bug, modulePath, testPath, notePath }) => [
    act.read(modulePath),
    act.read(testPath),
    act.edit(modulePath, bug.buggyLine, bug.fixedLine),
    act.exec(UNITTEST),
    act.write(
      notePath,
      `# Fix\n\n\`${bug.func}\` in ${modulePath} was wrong: ${bug.symptom}. Changed\n\n    ${bug.buggyLine.trim()}\n\nto\n\n    ${bug.fixedLine.trim()}\n`,
    ),
  ],
  params: ({ bug }) => ({ module: bug.module }),
});

/*
 * A module with one stubbed function, a spec in its docstring, visible tests and hidden cases.
 */
interface StubCase {
  module: string;
  func: string;
  signature: string;
  doc: string;
  implementation: string;
  tests: string;
  hidden: string[];
}

function durationStub(rng: Rng): StubCase {
  const cases = Array.from({ length: 5 }, () => {
    const h = rng.chance(0.6) ? rng.int(1, 12) : 0;
    const m = rng.chance(0.6) ? rng.int(1, 59) : 0;
    const s = rng.chance(0.5) || (h === 0 && m === 0) ? rng.int(1, 59) : 0;
    return [`${h ? `${h}h` : ''}${m ? `${m}m` : ''}${s ? `${s}s` : ''}`, h * 3600 + m * 60 + s] as const;
  });
  return {
    module: 'durations',
    func: 'parse_duration',
    signature: 'parse_duration(text)',
    doc: `Return the number of seconds in a duration like "1h30m", "45m", "2h", "90s" or "1h2m3s".

    Units are h, m and s, each at most once and in that order; at least one must be present.
    Anything else (empty string, unknown unit, wrong order, missing number) raises ValueError.`,
    implementation: `    import re

    match = re.fullmatch(r"(?:(\\d+)h)?(?:(\\d+)m)?(?:(\\d+)s)?", text)
    if not text or not match:
        raise ValueError(f"bad duration: {text!r}")
    hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds
`,
    tests: `import unittest

from durations import parse_duration


class DurationTest(unittest.TestCase):
    def test_examples(self):
        self.assertEqual(parse_duration("1h30m"), 5400)
        self.assertEqual(parse_duration("45m"), 2700)
        self.assertEqual(parse_duration("90s"), 90)

    def test_invalid(self):
        for bad in ["", "5x", "m5"]:
            with self.assertRaises(ValueError):
                parse_duration(bad)


if __name__ == "__main__":
    unittest.main()
`,
    hidden: [
      'from durations import parse_duration',
      ...cases.map(([t, v]) => `assert parse_duration(${JSON.stringify(t)}) == ${v}, ${JSON.stringify(t)}`),
      'for bad in ["1m1h", "h", "3d", "1h 2m"]:',
      '    try:',
      '        parse_duration(bad)',
      '    except ValueError:',
      '        continue',
      '    raise AssertionError(bad)',
    ],
  };
}

function toRoman(n: number): string {
  const table: Array<[number, string]> = [
    [1000, 'M'],
    [900, 'CM'],
    [500, 'D'],
    [400, 'CD'],
    [100, 'C'],
    [90, 'XC'],
    [50, 'L'],
    [40, 'XL'],
    [10, 'X'],
    [9, 'IX'],
    [5, 'V'],
    [4, 'IV'],
    [1, 'I'],
  ];
  let out = '';
  for (const [v, s] of table)
    while (n >= v) {
      out += s;
      n -= v;
    }
  return out;
}

function romanStub(rng: Rng): StubCase {
  const numbers = Array.from({ length: 6 }, () => rng.int(1, 3999));
  return {
    module: 'roman',
    func: 'roman_to_int',
    signature: 'roman_to_int(text)',
    doc: `Convert a Roman numeral (I, V, X, L, C, D, M, with subtractive pairs such as IV, IX, XL, XC, CD, CM) to an int.

    Values are 1-3999. An empty string or a character that is not a Roman digit raises ValueError.`,
    implementation: `    values = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
    if not text or any(ch not in values for ch in text):
        raise ValueError(f"not a Roman numeral: {text!r}")
    total = 0
    for i, ch in enumerate(text):
        value = values[ch]
        if i + 1 < len(text) and values[text[i + 1]] > value:
            total -= value
        else:
            total += value
    return total
`,
    tests: `import unittest

from roman import roman_to_int


class RomanTest(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(roman_to_int("III"), 3)
        self.assertEqual(roman_to_int("XIV"), 14)

    def test_subtractive(self):
        self.assertEqual(roman_to_int("MCMXCIV"), 1994)

    def test_invalid(self):
        with self.assertRaises(ValueError):
            roman_to_int("ABC")


if __name__ == "__main__":
    unittest.main()
`,
    hidden: [
      'from roman import roman_to_int',
      ...numbers.map((n) => `assert roman_to_int(${JSON.stringify(toRoman(n))}) == ${n}, ${n}`),
      'try:',
      '    roman_to_int("")',
      '    raise AssertionError("empty accepted")',
      'except ValueError:',
      '    pass',
    ],
  };
}

function chunkStub(rng: Rng): StubCase {
  const cases = Array.from({ length: 4 }, () => {
    const items = Array.from({ length: rng.int(0, 11) }, () => rng.int(0, 99));
    const size = rng.int(1, 5);
    const out: number[][] = [];
    for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
    return [items, size, out] as const;
  });
  return {
    module: 'batching',
    func: 'chunk',
    signature: 'chunk(items, size)',
    doc: `Split the list \`items\` into consecutive lists of \`size\` items; the last one may be shorter.

    chunk([], 3) == []. A size below 1 raises ValueError.`,
    implementation: `    if size < 1:
        raise ValueError("size must be at least 1")
    return [items[i:i + size] for i in range(0, len(items), size)]
`,
    tests: `import unittest

from batching import chunk


class ChunkTest(unittest.TestCase):
    def test_even(self):
        self.assertEqual(chunk([1, 2, 3, 4], 2), [[1, 2], [3, 4]])

    def test_remainder(self):
        self.assertEqual(chunk([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]])

    def test_bad_size(self):
        with self.assertRaises(ValueError):
            chunk([1], 0)


if __name__ == "__main__":
    unittest.main()
`,
    hidden: [
      'from batching import chunk',
      ...cases.map(
        ([items, size, out]) => `assert chunk(${JSON.stringify(items)}, ${size}) == ${JSON.stringify(out)}`,
      ),
      'assert chunk([], 4) == []',
    ],
  };
}

function luhnDigit(body: string): string {
  let sum = 0;
  for (let i = 0; i < body.length; i++) {
    let d = Number(body[body.length - 1 - i]);
    if (i % 2 === 0) d = d * 2 > 9 ? d * 2 - 9 : d * 2;
    sum += d;
  }
  return String((10 - (sum % 10)) % 10);
}

function luhnStub(rng: Rng): StubCase {
  const valid = Array.from({ length: 4 }, () => {
    const body = Array.from({ length: rng.int(8, 15) }, () => rng.int(0, 9)).join('');
    return body + luhnDigit(body);
  });
  const invalid = valid.map((v) => v.slice(0, -1) + String((Number(v.at(-1)) + rng.int(1, 9)) % 10));
  const spaced = valid[0]!.replace(/(\d{4})(?=\d)/g, '$1 ');
  return {
    module: 'checksums',
    func: 'luhn_valid',
    signature: 'luhn_valid(number)',
    doc: `True when \`number\` (a string of digits, spaces allowed between groups) passes the Luhn checksum.

    Strings with anything other than digits and spaces, or with fewer than two digits, are not valid.`,
    implementation: `    digits = number.replace(" ", "")
    if len(digits) < 2 or not digits.isdigit():
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0
`,
    tests: `import unittest

from checksums import luhn_valid


class LuhnTest(unittest.TestCase):
    def test_valid(self):
        self.assertTrue(luhn_valid("79927398713"))
        self.assertTrue(luhn_valid("4539 3195 0343 6467"))

    def test_invalid(self):
        self.assertFalse(luhn_valid("79927398710"))
        self.assertFalse(luhn_valid("12a4"))
        self.assertFalse(luhn_valid("0"))


if __name__ == "__main__":
    unittest.main()
`,
    hidden: [
      'from checksums import luhn_valid',
      ...valid.map((v) => `assert luhn_valid(${JSON.stringify(v)}) is True, ${JSON.stringify(v)}`),
      ...invalid.map((v) => `assert luhn_valid(${JSON.stringify(v)}) is False, ${JSON.stringify(v)}`),
      `assert luhn_valid(${JSON.stringify(spaced)}) is True`,
    ],
  };
}

const STUBS = [durationStub, romanStub, chunkStub, luhnStub];

const STUB_BODY = '    raise NotImplementedError\n';

const implementFunction = family({
  id: 'software.implement-function',
  category: CATEGORY,
  summary: 'implement a stubbed Python function from its docstring spec; visible and hidden tests',
  difficulty: 'medium',
  skills: ['python', 'implementation from spec', 'unit tests'],
  draw({ rng, persona }) {
    const stub = rng.pick(STUBS)(rng);
    return {
      stub,
      source: `"""Helpers for ${persona.org}'s internal tools."""


def ${stub.signature}:
    """${stub.doc}
    """
${STUB_BODY}`,
      author: givenNames(rng, 1)[0],
      modulePath: `${stub.module}.py`,
      testPath: `tests/test_${stub.module}.py`,
    };
  },
  prompt: ({ stub, author, modulePath, testPath }, { persona }) => ({
    opening: `${persona.intro}. ${author} started a helper module and left ${stub.func} unimplemented; please finish it.`,
    inputs: [
      [modulePath, `the module; the docstring of ${stub.func} is the specification`],
      [testPath, 'unit tests (do not change them)'],
    ],
    steps: [
      `Implement ${stub.signature} in ${modulePath} exactly as its docstring says (standard library only).`,
      `Make \`${UNITTEST}\` pass from the workspace root.`,
    ],
    outputs: [[modulePath, `the module with ${stub.func} implemented`]],
    notes: ['Other inputs than the ones in the tests will be checked too.'],
  }),
  files: ({ stub, source, modulePath, testPath }) => [
    { path: modulePath, content: source },
    { path: testPath, content: stub.tests },
  ],
  checks: ({ stub, modulePath }) => [
    check.command('unit_tests_pass', UNITTEST),
    pythonAsserts('hidden_cases_pass', stub.hidden),
    check.gone('stub_replaced', modulePath, 'raise NotImplementedError'),
  ],
  reference: ({ stub, modulePath, testPath }) => [
    act.read(modulePath),
    act.read(testPath),
    act.edit(modulePath, STUB_BODY, stub.implementation),
    act.exec(UNITTEST),
  ],
  params: ({ stub }) => ({ module: stub.module }),
});

const SENSORS = ['temperature', 'humidity', 'pressure', 'wait_minutes', 'basket_size', 'load_kw'];
const FEEDBACK_WORDS = [
  'great',
  'slow',
  'friendly',
  'price',
  'staff',
  'clean',
  'wait',
  'quality',
  'fresh',
  'busy',
  'helpful',
  'parking',
];

const COLSTATS_SCRIPT = `import csv, json, sys


def main(path, column):
    with open(path, newline="", encoding="utf-8") as f:
        values = [float(r[column]) for r in csv.DictReader(f) if r[column].strip()]
    print(json.dumps({"column": column, "count": len(values), "min": min(values), "max": max(values),
                      "mean": round(sum(values) / len(values), 2)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
`;
const COLSTATS_HIDDEN_CSV = 'k,v\n1,x\n4,y\n,z\n10,w\n';

/** `scripts/colstats.py <csv> <column>`: written, run, and run again on hidden data. */
const colstatsScript = family({
  id: 'software.cli-script',
  category: CATEGORY,
  summary: "write a stdlib-only CLI script printing one CSV column's statistics as JSON; run it",
  difficulty: 'medium',
  skills: ['python', 'cli', 'csv', 'statistics'],
  draw({ rng, persona }) {
    const columns = rng.sample(SENSORS, 3);
    const target = columns[rng.int(0, 2)]!;
    const rows = Array.from({ length: rng.int(10, 20) }, (_, i) => [
      `${persona.places[i % persona.places.length]}`,
      ...columns.map(() =>
        i > 0 && rng.chance(0.1) ? '' : String(rng.int(0, 400) / (rng.chance(0.5) ? 1 : 4)),
      ),
    ]);
    const values = rows
      .map((r) => r[1 + columns.indexOf(target)]!)
      .filter((v) => v !== '')
      .map(Number);
    return {
      columns,
      target,
      rows,
      values,
      mean: values.reduce((a, b) => a + b, 0) / values.length,
      colleague: givenNames(rng, 1)[0],
      inputPath: 'input/measurements.csv',
      scriptPath: 'scripts/colstats.py',
      outPath: `output/${target}_stats.json`,
    };
  },
  prompt: ({ columns, target, rows, colleague, inputPath, scriptPath, outPath }, { persona }) => ({
    opening: `${persona.intro}. ${colleague} keeps opening our ${rows.length}-row CSV exports in a spreadsheet just to get basic statistics; I'd like a small reusable script instead.`,
    inputs: [
      [inputPath, `readings per site with the columns site, ${columns.join(', ')} (cells may be blank)`],
    ],
    steps: [
      `Write ${scriptPath}: \`python3 ${scriptPath} <csv_path> <column>\` prints one JSON object with "column", "count" (non-blank cells), "min", "max" and "mean" (rounded to 2 decimals) of that column. Blank cells are ignored. Standard library only.`,
      `Run it on ${inputPath} for the ${target} column and save what it prints.`,
    ],
    outputs: [
      [scriptPath, 'the script'],
      [outPath, 'its output for the input file'],
    ],
    notes: ['The script will also be run on other CSV files.'],
  }),
  files: ({ columns, rows, inputPath }) => [{ path: inputPath, content: toCsv(['site', ...columns], rows) }],
  checks: ({ target, values, mean, scriptPath, outPath }) => [
    check.nonEmpty('script_exists', scriptPath),
    check.parses('output_parses', outPath, 'json'),
    check.value('output_column', outPath, '/column', target),
    check.value('output_count', outPath, '/count', values.length),
    check.value('output_min', outPath, '/min', Math.min(...values)),
    check.value('output_max', outPath, '/max', Math.max(...values)),
    check.value('output_mean', outPath, '/mean', Number(pyFixed(mean, 2)), 0.0051),
    check.command(
      'script_on_hidden_csv',
      `printf ${shellQuote(COLSTATS_HIDDEN_CSV)} | python3 ${scriptPath} /dev/stdin k | python3 -c ${shellQuote('import json, sys\nd = json.load(sys.stdin)\nassert d["count"] == 3 and d["min"] == 1 and d["max"] == 10 and abs(d["mean"] - 5) < 0.01, d')}`,
    ),
  ],
  reference: ({ target, inputPath, scriptPath, outPath }) => [
    act.read(inputPath),
    act.write(scriptPath, COLSTATS_SCRIPT),
    act.exec(`mkdir -p output && python3 ${scriptPath} ${inputPath} ${target} > ${outPath}`),
    act.exec(`cat ${outPath}`),
  ],
  params: ({ target }) => ({ variant: 'colstats', column: target }),
});

const WORDFREQ_SCRIPT = `import re, sys
from collections import Counter


def main(path, n):
    with open(path, encoding="utf-8") as f:
        counts = Counter(re.findall(r"[a-z]+", f.read().lower()))
    for word, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]:
        print(word, count)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
`;

/** Comment lines of words from `pool`, the earlier ones more frequent. */
function feedbackLines(rng: Rng, pool: string[]): string[] {
  const weights = pool.map((_, i) => 12 - i);
  return Array.from(
    { length: rng.int(8, 14) },
    () =>
      Array.from({ length: rng.int(4, 9) }, () => {
        let r = rng.int(0, weights.reduce((a, b) => a + b, 0) - 1);
        let i = 0;
        while (r >= weights[i]!) r -= weights[i++]!;
        const w = pool[i]!;
        return rng.chance(0.2) ? `${w[0]!.toUpperCase()}${w.slice(1)}` : w;
      }).join(rng.pick([' ', ', ', ' - '])) + rng.pick(['.', '!', '']),
  );
}

/** `scripts/wordfreq.py <file> <n>`: written, run, and run again on hidden text. */
const wordfreqScript = family({
  id: 'software.cli-script',
  category: CATEGORY,
  summary: "write a stdlib-only CLI script printing a text file's n most frequent words; run it",
  difficulty: 'easy',
  skills: ['python', 'cli', 'text processing'],
  draw({ rng }) {
    const n = rng.int(3, 6);
    const lines = feedbackLines(rng, rng.sample(FEEDBACK_WORDS, 8));
    const text = `${lines.join('\n')}\n`;
    const counts = new Map<string, number>();
    for (const w of text.toLowerCase().match(/[a-z]+/g) ?? []) counts.set(w, (counts.get(w) ?? 0) + 1);
    const ranked = [...counts].sort((a, b) => b[1] - a[1] || byString(a[0], b[0]));
    return {
      n,
      lines,
      text,
      distinct: counts.size,
      top: ranked.slice(0, n).map(([w, c]) => `${w} ${c}`),
      inputPath: 'input/feedback.txt',
      scriptPath: 'scripts/wordfreq.py',
      outPath: 'output/top_words.txt',
    };
  },
  prompt: ({ n, lines, inputPath, scriptPath, outPath }, { persona }) => ({
    opening: `${persona.intro}. I collected ${lines.length} customer comments for ${persona.org} in a text file and want to see which words come up most.`,
    inputs: [[inputPath, 'free-text comments, one per line']],
    steps: [
      `Write ${scriptPath}: \`python3 ${scriptPath} <text_file> <n>\` prints the n most frequent words, one per line as "<word> <count>". Words are runs of letters a-z after lower-casing everything (anything else separates words). Order by count descending, then alphabetically. Standard library only.`,
      `Run it on ${inputPath} with n = ${n} and save what it prints.`,
    ],
    outputs: [
      [scriptPath, 'the script'],
      [outPath, 'its output for the input file'],
    ],
    notes: ['The script will also be run on other text files.'],
  }),
  files: ({ text, inputPath }) => [{ path: inputPath, content: text }],
  checks: ({ n, top, scriptPath, outPath }) => [
    check.nonEmpty('script_exists', scriptPath),
    check.nonEmpty('output_exists', outPath),
    check.matches('first_line_is_top_word', outPath, `^\\s*${top[0]!.replace(' ', '\\s+')}\\s*(\\n|$)`),
    ...top.map((line, i) => check.matches(`line_${i + 1}`, outPath, lineRegex(line))),
    check.words('exactly_n_lines', outPath, 2 * n, 2 * n),
    check.command(
      'script_on_hidden_text',
      `printf 'b a B, c! a b\\nzeta a' | python3 ${scriptPath} /dev/stdin 2 | tr -s ' ' | grep -v '^$' > /tmp/out.txt && printf 'a 3\\nb 3\\n' | diff -q - /tmp/out.txt`,
    ),
  ],
  reference: ({ n, inputPath, scriptPath, outPath }) => [
    act.read(inputPath),
    act.write(scriptPath, WORDFREQ_SCRIPT),
    act.exec(`mkdir -p output && python3 ${scriptPath} ${inputPath} ${n} > ${outPath}`),
    act.exec(`cat ${outPath}`),
  ],
  params: ({ n, distinct }) => ({ variant: 'wordfreq', n, words: distinct }),
});

/** Either CLI script; the variant is drawn first, and each has its own skills and difficulty. */
const cliScript: TaskTemplate = {
  id: 'software.cli-script',
  category: CATEGORY,
  summary:
    'write a reusable stdlib-only CLI script, run it on the inputs, and keep its output (hidden inputs too)',
  build: (ctx) => (ctx.rng.chance(0.5) ? colstatsScript : wordfreqScript).build(ctx),
};

const PACKAGES = [
  'tinyhttp',
  'yamlette',
  'fastjinja',
  'imgkit-lite',
  'cryptobox',
  'sqlpipe',
  'taskq',
  'webforms',
  'datecalc',
  'mailmerge',
  'csvkit-mini',
  'authlite',
];
const SEVERITIES = ['critical', 'high', 'medium', 'low'] as const;

type Version = [number, number, number];
const cmpVersion = (a: Version, b: Version) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2];
const vstr = (v: Version) => v.join('.');

interface Pin {
  name: string;
  version: Version;
  /** `name==x.y.z`; otherwise a `>=` line the audit leaves alone. */
  pinned: boolean;
}
interface Advisory {
  id: string;
  package: string;
  introduced: Version | null;
  fixed: Version;
  severity: (typeof SEVERITIES)[number];
}

/** Requirements and advisories with at least two matches between them (redrawn until so). */
function drawAudit(rng: Rng) {
  for (;;) {
    const pins = rng.sample(PACKAGES, rng.int(6, 9)).map((name) => ({
      name,
      version: [rng.int(0, 4), rng.int(0, 12), rng.int(0, 9)] as Version,
      pinned: rng.chance(0.85),
    }));
    const advisories = drawAdvisories(rng, pins);
    const findings = auditFindings(pins, advisories);
    if (findings.length >= 2) return { pins, advisories, findings };
  }
}

/** Zero to two advisories per package, about two in three affecting its version. */
function drawAdvisories(rng: Rng, pins: Pin[]): Advisory[] {
  const advisories: Advisory[] = [];
  let seq = rng.int(10, 90);
  for (const p of pins) {
    for (let k = rng.chance(0.55) ? rng.int(1, 2) : 0; k > 0; k--) {
      const hit = rng.chance(0.65);
      const fixed: Version = hit
        ? [p.version[0], p.version[1], p.version[2] + rng.int(1, 3)]
        : [p.version[0], Math.max(0, p.version[1] - rng.int(1, 3)), rng.int(0, 5)];
      if (cmpVersion(fixed, p.version) === 0) continue;
      const introduced: Version | null = rng.chance(0.5) ? [Math.max(0, p.version[0] - 1), 0, 0] : null;
      advisories.push({
        id: `ADV-2024-${String(seq++).padStart(4, '0')}`,
        package: p.name,
        introduced,
        fixed,
        severity: rng.pick(SEVERITIES),
      });
    }
  }
  return advisories;
}

/** The (pinned package, advisory) matches in the report's order. */
function auditFindings(pins: Pin[], advisories: Advisory[]) {
  const affects = (a: Advisory, v: Version) =>
    (a.introduced === null || cmpVersion(v, a.introduced) >= 0) && cmpVersion(v, a.fixed) < 0;
  return advisories
    .flatMap((a) => {
      const p = pins.find((x) => x.name === a.package)!;
      return p.pinned && affects(a, p.version)
        ? [
            {
              package: a.package,
              installed: vstr(p.version),
              advisory: a.id,
              severity: a.severity,
              fixed_in: vstr(a.fixed),
            },
          ]
        : [];
    })
    .sort(
      (x, y) =>
        SEVERITIES.indexOf(x.severity) - SEVERITIES.indexOf(y.severity) ||
        byString(x.package, y.package) ||
        byString(x.advisory, y.advisory),
    );
}

function auditScript(advPath: string, auditPath: string, fixedPath: string): string {
  return `import json, os, re
def ver(s):
    return tuple(int(x) for x in s.split('.'))
def ok(v, cond):
    op, target = re.match(r'(>=|<=|==|<|>)(.+)', cond.strip()).groups()
    t = ver(target)
    return {'>=': v >= t, '<=': v <= t, '==': v == t, '<': v < t, '>': v > t}[op]
lines = open('requirements.txt').read().split('\\n')
pins = {m.group(1): m.group(2) for m in (re.match(r'^([\\w-]+)==([\\d.]+)$', l.strip()) for l in lines) if m}
adv = json.load(open(${JSON.stringify(advPath)}))
rank = {'critical': 0, 'high': 1, 'medium': 2, 'low': 3}
found = []
for a in adv:
    v = pins.get(a['package'])
    if v and all(ok(ver(v), c) for c in a['affected'].split(',')):
        found.append({'package': a['package'], 'installed': v, 'advisory': a['id'], 'severity': a['severity'], 'fixed_in': a['fixed_in']})
found.sort(key=lambda f: (rank[f['severity']], f['package'], f['advisory']))
os.makedirs('output', exist_ok=True)
json.dump({'vulnerable': found, 'counts': {s: sum(f['severity'] == s for f in found) for s in rank}}, open(${JSON.stringify(auditPath)}, 'w'), indent=2)
bump = {}
for f in found:
    if f['package'] not in bump or ver(f['fixed_in']) > ver(bump[f['package']]):
        bump[f['package']] = f['fixed_in']
out = []
for l in lines:
    m = re.match(r'^([\\w-]+)==', l.strip())
    out.append(m.group(1) + '==' + bump[m.group(1)] if m and m.group(1) in bump else l)
open(${JSON.stringify(fixedPath)}, 'w').write('\\n'.join(out))`;
}

const dependencyAudit = family({
  id: 'software.dependency-audit',
  category: CATEGORY,
  summary:
    'match pinned requirements against advisories (version ranges), report by severity, write bumped pins',
  difficulty: 'hard',
  skills: ['dependency management', 'semantic versions', 'security'],
  draw({ rng, persona }) {
    const { pins, advisories, findings } = drawAudit(rng);
    const bumps = new Map<string, Version>();
    for (const f of findings) {
      const v = f.fixed_in.split('.').map(Number) as Version;
      const have = bumps.get(f.package);
      if (!have || cmpVersion(v, have) > 0) bumps.set(f.package, v);
    }
    const reqLines = [`# ${persona.org} internal tools`, ''];
    for (const p of pins)
      reqLines.push(
        p.pinned ? `${p.name}==${vstr(p.version)}` : `${p.name}>=${p.version[0]}.${p.version[1]}`,
      );
    reqLines.push('');
    const fixedLines = reqLines.map((l) => {
      const m = /^([\w-]+)==/.exec(l);
      return m && bumps.has(m[1]!) ? `${m[1]}==${vstr(bumps.get(m[1]!)!)}` : l;
    });
    return {
      pins,
      advisories,
      findings,
      counts: Object.fromEntries(SEVERITIES.map((s) => [s, findings.filter((f) => f.severity === s).length])),
      reqLines,
      bumped: [...bumps].map(([name, v]) => `${name}==${vstr(v)}`),
      untouched: fixedLines.find((l) => /==/.test(l) && !bumps.has(l.split('==')[0]!)) ?? reqLines[0]!,
      contact: givenNames(rng, 1)[0],
      reqPath: 'requirements.txt',
      advPath: 'input/advisories.json',
      auditPath: 'output/audit.json',
      fixedPath: 'output/requirements.fixed.txt',
    };
  },
  prompt: ({ advisories, contact, reqPath, advPath, auditPath, fixedPath }, { persona }) => ({
    opening: `${persona.intro}. ${contact}, our security contact, sent ${advisories.length} advisories and I need to know which of our pinned dependencies are affected.`,
    inputs: [
      [reqPath, 'our dependencies; only exact pins ("name==x.y.z") are audited, other lines are left alone'],
      [
        advPath,
        'advisories: id, package, affected (a range such as "<1.4.2" or ">=1.0.0,<1.4.2"), fixed_in, severity',
      ],
    ],
    steps: [
      'Compare versions numerically part by part (1.10.0 is newer than 1.9.3).',
      "A pinned package is vulnerable to an advisory when its version satisfies every condition of the advisory's affected range.",
      'Audit: "vulnerable" — a list of {"package", "installed", "advisory", "severity", "fixed_in"}, one per (package, advisory) match, sorted by severity (critical, high, medium, low), then package, then advisory id; "counts" — severity -> number of matches, all four severities.',
      'Fixed requirements: a copy of requirements.txt where each vulnerable pin is raised to the highest fixed_in among its matches; every other line unchanged.',
    ],
    outputs: [
      [auditPath, 'the audit report'],
      [fixedPath, 'the fixed requirements'],
    ],
  }),
  files: ({ advisories, reqLines, reqPath, advPath }) => [
    { path: reqPath, content: reqLines.join('\n') },
    {
      path: advPath,
      content: `${JSON.stringify(
        advisories.map((a) => ({
          id: a.id,
          package: a.package,
          affected: a.introduced ? `>=${vstr(a.introduced)},<${vstr(a.fixed)}` : `<${vstr(a.fixed)}`,
          fixed_in: vstr(a.fixed),
          severity: a.severity,
        })),
        null,
        2,
      )}\n`,
    },
  ],
  checks: ({ findings, counts, bumped, untouched, auditPath, fixedPath }) => [
    check.nonEmpty('audit_exists', auditPath),
    check.parses('audit_parses', auditPath, 'json'),
    check.keys('audit_keys', auditPath, ['vulnerable', 'counts']),
    check.value('vulnerable_list', auditPath, '/vulnerable', findings),
    check.value('severity_counts', auditPath, '/counts', counts),
    ...bumped.map((line, i) => check.matches(`bumped_pin_${i + 1}`, fixedPath, lineRegex(line))),
    check.matches('other_lines_kept', fixedPath, lineRegex(untouched)),
  ],
  reference: ({ reqPath, advPath, auditPath, fixedPath }) => [
    act.read(reqPath),
    act.read(advPath),
    act.python(auditScript(advPath, auditPath, fixedPath)),
    act.exec(`cat ${auditPath}; diff ${reqPath} ${fixedPath} || true`),
  ],
  params: ({ pins, advisories, findings }) => ({
    packages: pins.length,
    advisories: advisories.length,
    findings: findings.length,
  }),
});

/** Tests written by the agent must pass on the module and fail on each of its mutants. */
const MUTANT_SUBJECTS = [
  {
    module: 'inventory',
    source: (org: string, low: number) => `"""Stock levels for ${org}."""


def restock_needed(on_hand, reorder_point):
    """True when stock is at or below the reorder point."""
    return on_hand <= reorder_point


def units_to_order(on_hand, target):
    """Units needed to reach \`target\` (never negative)."""
    return max(0, target - on_hand)


def is_low(on_hand):
    """True when fewer than ${low} units are left."""
    return on_hand < ${low}
`,
    functions: ['restock_needed', 'units_to_order', 'is_low'],
    mutants: [
      ['    return on_hand <= reorder_point\n', '    return on_hand < reorder_point\n'],
      ['    return max(0, target - on_hand)\n', '    return target - on_hand\n'],
    ],
    tests: (low: number) => `import unittest

from inventory import is_low, restock_needed, units_to_order


class InventoryTest(unittest.TestCase):
    def test_restock_at_the_point(self):
        self.assertTrue(restock_needed(5, 5))

    def test_restock_above(self):
        self.assertFalse(restock_needed(6, 5))

    def test_units_to_order(self):
        self.assertEqual(units_to_order(3, 10), 7)

    def test_units_never_negative(self):
        self.assertEqual(units_to_order(12, 10), 0)

    def test_is_low(self):
        self.assertTrue(is_low(${low - 1}))
        self.assertFalse(is_low(${low}))


if __name__ == "__main__":
    unittest.main()
`,
  },
  {
    module: 'scheduling',
    source: (org: string, low: number) => `"""Shift helpers for ${org}."""


def overlaps(a_start, a_end, b_start, b_end):
    """True when [a_start, a_end) and [b_start, b_end) share time (minutes since midnight)."""
    return a_start < b_end and b_start < a_end


def shift_minutes(start, end):
    """Length of a shift; a shift ending before it starts runs past midnight."""
    return end - start if end >= start else end + 1440 - start


def is_short(start, end):
    """True when a shift is under ${low} minutes."""
    return shift_minutes(start, end) < ${low}
`,
    functions: ['overlaps', 'shift_minutes', 'is_short'],
    mutants: [
      [
        '    return a_start < b_end and b_start < a_end\n',
        '    return a_start <= b_end and b_start <= a_end\n',
      ],
      ['    return end - start if end >= start else end + 1440 - start\n', '    return abs(end - start)\n'],
    ],
    tests: (low: number) => `import unittest

from scheduling import is_short, overlaps, shift_minutes


class SchedulingTest(unittest.TestCase):
    def test_overlap(self):
        self.assertTrue(overlaps(540, 600, 570, 630))

    def test_touching_shifts_do_not_overlap(self):
        self.assertFalse(overlaps(540, 600, 600, 660))

    def test_shift_minutes(self):
        self.assertEqual(shift_minutes(540, 1020), 480)

    def test_overnight_shift(self):
        self.assertEqual(shift_minutes(1320, 360), 480)

    def test_is_short(self):
        self.assertTrue(is_short(600, ${600 + low - 1}))
        self.assertFalse(is_short(600, ${600 + low}))


if __name__ == "__main__":
    unittest.main()
`,
  },
];

/** Python that runs the suite in tests/ on the module, or on the module with `mutation` applied. */
function suiteRunner(
  module: string,
  modulePath: string,
  minTests: number,
  mutation: readonly [string, string] | null,
): string[] {
  return [
    'import sys, types, unittest',
    ...(mutation
      ? [
          `src = open(${JSON.stringify(modulePath)}).read()`,
          `old, new = ${JSON.stringify(mutation[0])}, ${JSON.stringify(mutation[1])}`,
          'assert old in src, "module changed"',
          `mod = types.ModuleType(${JSON.stringify(module)})`,
          'exec(src.replace(old, new), mod.__dict__)',
          `sys.modules[${JSON.stringify(module)}] = mod`,
        ]
      : []),
    `suite = unittest.defaultTestLoader.discover("tests")`,
    'result = unittest.TextTestRunner(stream=open("/dev/null", "w")).run(suite)',
    mutation
      ? 'assert result.testsRun > 0 and not result.wasSuccessful(), "the mutant survived"'
      : `assert result.testsRun >= ${minTests} and result.wasSuccessful(), (result.testsRun, result.failures, result.errors)`,
  ];
}

const writeTests = family({
  id: 'software.write-tests',
  category: CATEGORY,
  summary: 'write a unittest suite that passes on a module and catches its (hidden) mutants',
  difficulty: 'medium',
  skills: ['python', 'unit testing', 'boundary cases'],
  draw({ rng, persona }) {
    const subject = rng.pick(MUTANT_SUBJECTS);
    const low = rng.int(3, 9) * (subject.module === 'scheduling' ? 30 : 1);
    return {
      subject,
      low,
      minTests: rng.int(3, 5),
      source: subject.source(persona.org, low),
      refactorer: givenNames(rng, 1)[0],
      modulePath: `${subject.module}.py`,
      testPath: `tests/test_${subject.module}.py`,
    };
  },
  prompt: ({ subject, minTests, refactorer, modulePath, testPath }, { persona }) => ({
    opening: `${persona.intro}. ${modulePath} works, but it has no tests and ${refactorer} is about to refactor it. Please write a unittest suite for it first.`,
    inputs: [[modulePath, `the module (${subject.functions.join(', ')}); do not change it`]],
    steps: [
      `Write at least ${minTests} test methods in ${testPath} (unittest, standard library only), covering every function, including the boundaries the docstrings describe.`,
      `The suite must pass with \`${UNITTEST}\` from the workspace root.`,
    ],
    outputs: [[testPath, 'the test suite']],
    notes: [
      'The suite will also be run against subtly broken copies of the module: a good suite fails on them.',
    ],
  }),
  files: ({ source, modulePath }) => [{ path: modulePath, content: source }],
  checks: ({ subject, minTests, modulePath, testPath }) => [
    check.nonEmpty('test_file_exists', testPath),
    pythonAsserts('suite_passes_with_enough_tests', suiteRunner(subject.module, modulePath, minTests, null)),
    ...subject.mutants.map((m, i) =>
      pythonAsserts(
        `suite_catches_mutant_${i + 1}`,
        suiteRunner(subject.module, modulePath, minTests, m as [string, string]),
      ),
    ),
  ],
  reference: ({ subject, low, modulePath, testPath }) => [
    act.read(modulePath),
    act.write(testPath, subject.tests(low)),
    act.exec(UNITTEST),
  ],
  params: ({ subject, minTests }) => ({ module: subject.module, minTests }),
});

export const SOFTWARE_TEMPLATES: readonly TaskTemplate[] = [
  fixBug,
  implementFunction,
  cliScript,
  dependencyAudit,
  writeTests,
];
