import { byString, cents, escapeRegex, inOrderRegex, pyFixed, slugify, toCsv } from '../format.js';
import { LAST_NAMES } from '../people.js';
import type { Rng } from '../rng.js';
import { act, check, family, fullNames, PY_READ_CSV, type TaskTemplate } from '../template.js';
import { someDate } from './productivity.js';

const CATEGORY = 'Content & Domain' as const;

const SECTIONS = ['Bestsellers', 'Seasonal', 'Essentials', 'New Arrivals', 'Gifts', 'Classics'];
const TAGLINES = [
  'a customer favorite',
  'limited run',
  'back by popular demand',
  'made in small batches',
  'our best value',
  'new this season',
];

interface CatalogProduct {
  sku: string;
  name: string;
  category: string;
  price: number;
  in_stock: boolean;
  tagline: string;
}

/** The expected page: one section per used category, a table of its listed products by name. */
function catalogMarkdown(org: string, title: string, used: string[], listed: CatalogProduct[]): string {
  const lines = [title, '', `Everything we currently have in stock at ${org}.`, ''];
  for (const cat of used) {
    lines.push(`## ${cat}`, '', '| SKU | Name | Price |', '|---|---|---|');
    for (const p of listed.filter((x) => x.category === cat).sort((a, b) => byString(a.name, b.name)))
      lines.push(`| ${p.sku} | ${p.name} | $${cents(p.price)} |`);
    lines.push('');
  }
  lines.push(`Products listed: ${listed.length}`, '');
  return lines.join('\n');
}

const catalogPage = family({
  id: 'content.catalog-page',
  category: CATEGORY,
  summary: 'render a product JSON as a Markdown catalog: sections, tables, in-stock filter, counts',
  difficulty: 'easy',
  skills: ['markdown', 'json', 'content generation'],
  draw({ rng, persona }) {
    for (;;) {
      const sections = rng.sample(SECTIONS, rng.int(2, 4));
      const products: CatalogProduct[] = rng.sample(persona.items, rng.int(6, 9)).map((name, i) => ({
        sku: `${slugify(persona.org).slice(0, 4).toUpperCase()}${String(10 + i * 3 + rng.int(0, 2))}`,
        name,
        category: rng.pick(sections),
        price: rng.int(199, 12000),
        in_stock: rng.chance(0.75),
        tagline: rng.pick(TAGLINES),
      }));
      const listed = products.filter((p) => p.in_stock);
      const used = [...new Set(listed.map((p) => p.category))].sort(byString);
      if (used.length < 2 || listed.length === products.length) continue;
      const title = `# ${persona.org} Catalog`;
      return {
        products,
        listed,
        used,
        title,
        page: catalogMarkdown(persona.org, title, used, listed),
        outOfStock: products
          .filter((p) => !p.in_stock)
          .map((p) => p.sku)
          .sort(byString),
        perSection: Object.fromEntries(used.map((c) => [c, listed.filter((p) => p.category === c).length])),
        season: rng.pick(['spring', 'summer', 'autumn', 'winter', 'holiday', 'back-to-school']),
        inputPath: 'input/products.json',
        mdPath: 'output/catalog.md',
        jsonPath: 'output/catalog_stats.json',
      };
    }
  },
  prompt: ({ products, title, season, inputPath, mdPath, jsonPath }, { persona }) => ({
    opening: `${persona.intro}. I want a simple ${season} catalog page for our website, generated from the ${products.length} products in our list instead of typed by hand.`,
    inputs: [
      [
        inputPath,
        'a JSON list of products with sku, name, category, price (number, dollars), in_stock and tagline',
      ],
    ],
    steps: [
      `Start the page with the heading "${title}".`,
      'List only products that are in stock. Make one "## <category>" section per category that has any, in alphabetical order.',
      'In each section put a Markdown table with the header "| SKU | Name | Price |", one row per product sorted by name, prices written like $12.50.',
      'End the page with the line "Products listed: <count>".',
      'Also write stats: "listed" (count), "out_of_stock" (skus not listed, sorted) and "sections" (category -> number of listed products).',
    ],
    outputs: [
      [mdPath, 'the catalog page'],
      [jsonPath, 'the stats object'],
    ],
  }),
  late: ({ listed }, rng) => ({ sample: rng.sample(listed, 2) }),
  files: ({ products, inputPath }) => [
    {
      path: inputPath,
      content: `${JSON.stringify(
        products.map((p) => ({ ...p, price: Number(cents(p.price)) })),
        null,
        2,
      )}\n`,
    },
  ],
  checks({ listed, used, title, outOfStock, perSection, sample, mdPath, jsonPath }) {
    const firstSection = listed
      .filter((p) => p.category === used[0])
      .sort((a, b) => byString(a.name, b.name));
    return [
      check.nonEmpty('catalog_exists', mdPath),
      check.contains('catalog_title', mdPath, title),
      check.matches('sections_in_order', mdPath, inOrderRegex(used.map((c) => `## ${c}`))),
      ...sample.map((p, i) =>
        check.matches(
          `table_row_${i + 1}`,
          mdPath,
          `\\|\\s*${escapeRegex(p.sku)}\\s*\\|\\s*${escapeRegex(p.name)}\\s*\\|\\s*\\$${escapeRegex(cents(p.price))}\\s*\\|`,
        ),
      ),
      check.matches(
        'rows_sorted_by_name',
        mdPath,
        inOrderRegex([`## ${used[0]}`, ...firstSection.map((p) => `| ${p.name} |`)]),
      ),
      check.contains('listed_count_line', mdPath, `Products listed: ${listed.length}`),
      check.parses('stats_parses', jsonPath, 'json'),
      check.value('stats_listed', jsonPath, '/listed', listed.length),
      check.value('stats_out_of_stock', jsonPath, '/out_of_stock', outOfStock),
      check.value('stats_sections', jsonPath, '/sections', perSection),
    ];
  },
  reference: ({ listed, page, outOfStock, perSection, inputPath, mdPath, jsonPath }) => [
    act.read(inputPath),
    act.write(mdPath, page),
    act.write(
      jsonPath,
      `${JSON.stringify({ listed: listed.length, out_of_stock: outOfStock, sections: perSection }, null, 2)}\n`,
    ),
    act.exec(`grep -c '^| ' ${mdPath}; cat ${jsonPath}`),
  ],
  params: ({ products, listed, used }) => ({
    products: products.length,
    listed: listed.length,
    sections: used.length,
  }),
});

const COMMIT_TYPES = ['feat', 'fix', 'perf', 'docs', 'chore', 'refactor', 'test'] as const;
const COMMIT_MESSAGES: Record<(typeof COMMIT_TYPES)[number], ReadonlyArray<(x: string) => string>> = {
  feat: [
    (x) => `add ${x} export`,
    (x) => `support bulk ${x} updates`,
    (x) => `show ${x} history`,
    (x) => `add ${x} search filter`,
  ],
  fix: [
    (x) => `handle empty ${x} list`,
    (x) => `correct ${x} totals rounding`,
    (x) => `stop duplicate ${x} emails`,
    (x) => `keep ${x} sort order`,
  ],
  perf: [(x) => `cache ${x} lookups`, (x) => `speed up ${x} report`],
  docs: [(x) => `document ${x} settings`, (x) => `update README for ${x}`],
  chore: [(x) => `bump ${x} dependencies`, () => 'update CI image'],
  refactor: [(x) => `split ${x} module`, (x) => `rename ${x} helpers`],
  test: [(x) => `cover ${x} edge cases`],
};
const SECTION_OF: Record<string, string> = { feat: 'Features', fix: 'Bug Fixes', perf: 'Performance' };

interface Commit {
  sha: string;
  type: (typeof COMMIT_TYPES)[number];
  scope: string | null;
  breaking: boolean;
  message: string;
}

/** A commit's entry in the notes. */
function commitBullet(c: Commit): string {
  return `- ${c.scope ? `**${c.scope}:** ` : ''}${c.message} (${c.sha})`;
}

/** Commits with distinct messages, newest first. */
function drawCommits(rng: Rng, scopes: string[], items: readonly string[]): Commit[] {
  const used = new Set<string>();
  return Array.from({ length: rng.int(9, 15) }, () => {
    const type = rng.pick(COMMIT_TYPES);
    let message: string;
    do message = rng.pick(COMMIT_MESSAGES[type])(rng.pick(items).toLowerCase());
    while (used.has(message));
    used.add(message);
    const sha = Array.from({ length: 7 }, () => '0123456789abcdef'[rng.int(0, 15)]).join('');
    return {
      sha,
      type,
      scope: rng.chance(0.6) ? rng.pick(scopes) : null,
      breaking: rng.chance(0.08),
      message,
    };
  });
}

const releaseNotes = family({
  id: 'content.release-notes',
  category: CATEGORY,
  summary: 'turn conventional commits into release notes with the next semantic version',
  difficulty: 'medium',
  skills: ['semantic versioning', 'changelog', 'markdown'],
  draw({ rng, persona }) {
    for (;;) {
      const scopes = rng.sample(persona.systems, 3);
      const commits = drawCommits(rng, scopes, persona.items);
      const current = [rng.int(0, 3), rng.int(0, 12), rng.int(0, 9)] as const;
      const breaking = commits.filter((c) => c.breaking);
      const feats = commits.filter((c) => !c.breaking && c.type === 'feat');
      const fixes = commits.filter((c) => !c.breaking && c.type === 'fix');
      const perfs = commits.filter((c) => !c.breaking && c.type === 'perf');
      if (feats.length + fixes.length === 0) continue;
      const next =
        breaking.length > 0
          ? `${current[0] + 1}.0.0`
          : feats.length > 0
            ? `${current[0]}.${current[1] + 1}.0`
            : `${current[0]}.${current[1]}.${current[2] + 1}`;
      const date = someDate(rng);
      const sections: Array<[string, Commit[]]> = [
        ['Breaking Changes', breaking],
        ['Features', feats],
        ['Bug Fixes', fixes],
        ['Performance', perfs],
      ];
      return {
        commits,
        current,
        breaking,
        feats,
        fixes,
        next,
        date,
        present: sections.filter(([, list]) => list.length > 0),
        heading: `## v${next} (${date})`,
        omitted: commits.length - breaking.length - feats.length - fixes.length - perfs.length,
        commitsPath: 'input/commits.txt',
        versionPath: 'input/VERSION',
        mdPath: 'output/RELEASE_NOTES.md',
        jsonPath: 'output/release.json',
      };
    }
  },
  prompt: ({ date, commitsPath, versionPath, mdPath, jsonPath }, { persona }) => ({
    opening: `${persona.intro}, and I also maintain the small internal tool our team uses. Please write the release notes for the next release (date ${date}).`,
    inputs: [
      [
        commitsPath,
        'one commit per line, newest first: "<sha> <type>(<scope>)!: <message>" — the scope and the "!" (breaking change) are optional',
      ],
      [versionPath, 'the current version (MAJOR.MINOR.PATCH)'],
    ],
    steps: [
      'Next version: any breaking commit bumps MAJOR (MINOR and PATCH reset to 0); otherwise any feat bumps MINOR (PATCH resets to 0); otherwise bump PATCH.',
      `Start the notes with "## v<next version> (${date})".`,
      'Then these sections, in this order, each only if it has entries: "### Breaking Changes" (every breaking commit, whatever its type), "### Features" (feat), "### Bug Fixes" (fix), "### Performance" (perf). Breaking commits appear only under Breaking Changes. Other types are left out.',
      'Each entry is a bullet "- **<scope>:** <message> (<sha>)", or "- <message> (<sha>)" without a scope, in the order of the commit list.',
      'Also write "version", "features", "fixes", "breaking" and "omitted" (number of commits left out) as JSON.',
    ],
    outputs: [
      [mdPath, 'the release notes'],
      [jsonPath, 'the counts'],
    ],
  }),
  late: ({ feats, fixes }, rng) => ({
    probes: rng.sample([...feats, ...fixes], Math.min(2, feats.length + fixes.length)),
  }),
  files: ({ commits, current, commitsPath, versionPath }) => [
    {
      path: commitsPath,
      content: `${commits.map((c) => `${c.sha} ${c.type}${c.scope ? `(${c.scope})` : ''}${c.breaking ? '!' : ''}: ${c.message}`).join('\n')}\n`,
    },
    { path: versionPath, content: `${current.join('.')}\n` },
  ],
  checks: ({ breaking, feats, fixes, next, present, heading, omitted, probes, mdPath, jsonPath }) => [
    check.nonEmpty('notes_exist', mdPath),
    check.contains('version_heading', mdPath, heading),
    check.matches('sections_in_order', mdPath, inOrderRegex(present.map(([t]) => `### ${t}`))),
    ...probes.map((c, i) => check.contains(`entry_${i + 1}`, mdPath, commitBullet(c))),
    check.parses('release_json_parses', jsonPath, 'json'),
    check.value('next_version', jsonPath, '/version', next),
    check.value('feature_count', jsonPath, '/features', feats.length),
    check.value('fix_count', jsonPath, '/fixes', fixes.length),
    check.value('breaking_count', jsonPath, '/breaking', breaking.length),
    check.value('omitted_count', jsonPath, '/omitted', omitted),
  ],
  reference: ({ date, commitsPath, versionPath, mdPath, jsonPath }) => [
    act.read(commitsPath),
    act.read(versionPath),
    act.python(`${PY_READ_CSV}
import re
commits = []
for line in open(${JSON.stringify(commitsPath)}, encoding='utf-8'):
    m = re.match(r'^([0-9a-f]{7}) (\\w+)(?:\\(([^)]+)\\))?(!)?: (.+)$', line.strip())
    if m:
        commits.append({'sha': m.group(1), 'type': m.group(2), 'scope': m.group(3), 'breaking': bool(m.group(4)), 'msg': m.group(5)})
major, minor, patch = map(int, open(${JSON.stringify(versionPath)}).read().strip().split('.'))
if any(c['breaking'] for c in commits):
    version = f'{major + 1}.0.0'
elif any(c['type'] == 'feat' for c in commits):
    version = f'{major}.{minor + 1}.0'
else:
    version = f'{major}.{minor}.{patch + 1}'
sections = [('Breaking Changes', [c for c in commits if c['breaking']])]
for t, title in (('feat', 'Features'), ('fix', 'Bug Fixes'), ('perf', 'Performance')):
    sections.append((title, [c for c in commits if c['type'] == t and not c['breaking']]))
out = [${JSON.stringify(`## v`)} + version + ' (${date})', '']
for title, items in sections:
    if items:
        out.append('### ' + title)
        out += ['- ' + (f"**{c['scope']}:** " if c['scope'] else '') + f"{c['msg']} ({c['sha']})" for c in items]
        out.append('')
write_text(${JSON.stringify(mdPath)}, '\\n'.join(out))
n = {title: len(items) for title, items in sections}
write_json(${JSON.stringify(jsonPath)}, {'version': version, 'features': n['Features'], 'fixes': n['Bug Fixes'], 'breaking': n['Breaking Changes'],
    'omitted': len(commits) - sum(n.values())})`),
    act.exec(`cat ${mdPath}`),
  ],
  params: ({ commits, breaking, present }) => ({
    commits: commits.length,
    breaking: breaking.length,
    sections: present.map(([t]) => SECTION_OF[t] ?? t),
  }),
});

const TERMS: ReadonlyArray<[string, string]> = [
  ['Backlog', 'The ordered list of work that has been accepted but not started.'],
  ['Burn rate', 'How fast cash is spent each month.'],
  ['Churn', 'The share of customers who leave in a period.'],
  ['Lead time', 'Time from a request to its delivery.'],
  ['Runbook', 'Step-by-step instructions for a routine or emergency procedure.'],
  ['SLA', 'A service level agreement: the promised availability or response time.'],
  ['SKU', 'A stock keeping unit: one sellable item variant.'],
  ['Throughput', 'Units of work finished per unit of time.'],
  ['Margin', 'Revenue minus cost, as a share of revenue.'],
  ['Onboarding', 'Getting a new customer, member or colleague up to speed.'],
  ['Retrospective', 'A meeting that looks back on a period to improve the next one.'],
  ['Stakeholder', 'Anyone affected by or with influence on a project.'],
  ['Milestone', 'A checkpoint that marks the end of a phase.'],
  ['Escalation', 'Passing an issue to someone with more authority or expertise.'],
  ['Forecast', 'An estimate of a future value based on past data.'],
  ['KPI', 'A key performance indicator: a number that shows progress toward a goal.'],
  ['Purchase order', "A buyer's written request to a supplier, with quantities and prices."],
  ['Roadmap', 'A plan of what will be delivered and roughly when.'],
  ['Vendor', 'A company that supplies goods or services.'],
  ['Audit trail', 'A chronological record of who changed what, and when.'],
  ['Capacity', 'The most work a team or machine can handle in a period.'],
  ['Deliverable', 'A concrete result handed over at the end of a task.'],
  ['Handoff', 'The moment work passes from one person or team to another.'],
  ['Incident', 'An unplanned interruption or degradation of a service.'],
  ['Ledger', 'The book of record for financial transactions.'],
  ['Pipeline', 'The sequence of stages work or deals move through.'],
  ['Refund', 'Money returned to a customer.'],
  ['Retention', 'The share of customers or members who stay.'],
  ['Scope creep', "Uncontrolled growth of a project's requirements."],
  ['Triage', 'Sorting issues by urgency before working on them.'],
  ['Uptime', 'The share of time a service is available.'],
  ['Waitlist', 'An ordered list of people waiting for a place.'],
  ['Cycle time', 'Time from starting a piece of work to finishing it.'],
  ['Cost center', 'A unit of an organization that incurs costs but earns no revenue directly.'],
  ['Accrual', 'Revenue or expense recorded when earned or incurred, not when paid.'],
  ['Quota', 'A fixed share or target assigned to a person or team.'],
];

interface GlossaryRow {
  term: string;
  definition: string;
  seeAlso: string;
}

/** A term's bullet in the glossary. */
function glossaryEntry(r: GlossaryRow): string {
  return `- **${r.term}**: ${r.definition}${r.seeAlso ? ` See also: ${r.seeAlso}.` : ''}`;
}

const glossary = family({
  id: 'content.glossary',
  category: CATEGORY,
  summary:
    'build an alphabetical Markdown glossary with letter headings and cross references, plus an index JSON',
  difficulty: 'easy',
  skills: ['markdown', 'sorting', 'technical writing'],
  draw({ rng, persona }) {
    const picked = rng.sample(TERMS, rng.int(8, 12));
    const names = picked.map(([t]) => t);
    const rows: GlossaryRow[] = picked.map(([term, definition]) => ({
      term,
      definition,
      seeAlso: rng.chance(0.35) ? rng.pick(names.filter((n) => n !== term)) : '',
    }));
    const sorted = [...rows].sort((a, b) => byString(a.term.toLowerCase(), b.term.toLowerCase()));
    return {
      rows,
      sorted,
      letters: [...new Set(sorted.map((r) => r.term[0]!.toUpperCase()))],
      title: `# ${persona.org} Glossary`,
      inputPath: 'input/terms.csv',
      mdPath: 'output/GLOSSARY.md',
      jsonPath: 'output/glossary_index.json',
    };
  },
  prompt: ({ title, inputPath, mdPath, jsonPath }, { persona }) => ({
    opening: `${persona.intro}. New people keep asking what our jargon means, so I collected the terms; please turn them into a glossary page.`,
    inputs: [[inputPath, 'columns term, definition, see_also (another term, or empty)']],
    steps: [
      `Start with the heading "${title}".`,
      'Sort the terms alphabetically, ignoring case. Group them under a "## <letter>" heading for each initial letter (upper case) that has terms.',
      'Write each term as a bullet "- **<term>**: <definition>", and when see_also is set append " See also: <see_also>." to the same line.',
      'Also write an index: "terms" (count), "letters" (the letter headings in order) and "first_term" / "last_term" (in sorted order).',
    ],
    outputs: [
      [mdPath, 'the glossary'],
      [jsonPath, 'the index object'],
    ],
  }),
  late: ({ rows }, rng) => ({ probes: rng.sample(rows, 3) }),
  files: ({ rows, inputPath }) => [
    {
      path: inputPath,
      content: toCsv(
        ['term', 'definition', 'see_also'],
        rows.map((r) => [r.term, r.definition, r.seeAlso]),
      ),
    },
  ],
  checks: ({ rows, sorted, letters, title, probes, mdPath, jsonPath }) => [
    check.nonEmpty('glossary_exists', mdPath),
    check.contains('glossary_title', mdPath, title),
    check.matches('letter_headings_in_order', mdPath, inOrderRegex(letters.map((l) => `## ${l}\n`))),
    check.matches('terms_in_order', mdPath, inOrderRegex(sorted.map((r) => `**${r.term}**`))),
    ...probes.map((r, i) => check.contains(`entry_${i + 1}`, mdPath, glossaryEntry(r))),
    check.parses('index_parses', jsonPath, 'json'),
    check.value('index_terms', jsonPath, '/terms', rows.length),
    check.value('index_letters', jsonPath, '/letters', letters),
    check.value('index_first_term', jsonPath, '/first_term', sorted[0]!.term),
    check.value('index_last_term', jsonPath, '/last_term', sorted.at(-1)!.term),
  ],
  reference: ({ title, inputPath, mdPath, jsonPath }) => [
    act.read(inputPath),
    act.python(`${PY_READ_CSV}
rows = sorted(read_csv(${JSON.stringify(inputPath)}), key=lambda r: r['term'].lower())
out, letters = [${JSON.stringify(title)}, ''], []
for r in rows:
    letter = r['term'][0].upper()
    if letter not in letters:
        letters.append(letter)
        out += ['', '## ' + letter, '']
    see = f" See also: {r['see_also']}." if r['see_also'] else ''
    out.append(f"- **{r['term']}**: {r['definition']}{see}")
write_text(${JSON.stringify(mdPath)}, '\\n'.join(out) + '\\n')
write_json(${JSON.stringify(jsonPath)}, {'terms': len(rows), 'letters': letters, 'first_term': rows[0]['term'], 'last_term': rows[-1]['term']})`),
    act.exec(`cat ${mdPath}`),
  ],
  params: ({ rows, letters }) => ({ terms: rows.length, letters: letters.length }),
});

const RECIPES: ReadonlyArray<{
  name: string;
  servings: number;
  ingredients: Array<[string, number, string]>;
  steps: string[];
}> = [
  {
    name: 'Red Lentil Soup',
    servings: 4,
    ingredients: [
      ['red lentils', 300, 'g'],
      ['vegetable stock', 1200, 'ml'],
      ['onion', 1, 'pcs'],
      ['cumin', 1.5, 'tsp'],
      ['olive oil', 2, 'tbsp'],
      ['lemon', 1, 'pcs'],
    ],
    steps: [
      'Soften the onion in the oil.',
      'Add cumin, lentils and stock; simmer 20 minutes.',
      'Blend and finish with lemon juice.',
    ],
  },
  {
    name: 'Veggie Chili',
    servings: 6,
    ingredients: [
      ['kidney beans', 800, 'g'],
      ['chopped tomatoes', 800, 'g'],
      ['bell pepper', 2, 'pcs'],
      ['chili powder', 2, 'tsp'],
      ['corn', 300, 'g'],
      ['water', 250, 'ml'],
    ],
    steps: ['Fry the pepper until soft.', 'Add everything else and simmer 40 minutes.', 'Season and serve.'],
  },
  {
    name: 'Lemon Bars',
    servings: 12,
    ingredients: [
      ['flour', 250, 'g'],
      ['butter', 200, 'g'],
      ['sugar', 300, 'g'],
      ['eggs', 4, 'pcs'],
      ['lemon juice', 120, 'ml'],
      ['salt', 0.5, 'tsp'],
    ],
    steps: [
      'Press flour, butter and half the sugar into a tin and bake 15 minutes.',
      'Whisk eggs, the rest of the sugar and the juice; pour over.',
      'Bake 20 minutes and cool before cutting.',
    ],
  },
  {
    name: 'Pasta Salad',
    servings: 8,
    ingredients: [
      ['pasta', 500, 'g'],
      ['cherry tomatoes', 400, 'g'],
      ['feta', 200, 'g'],
      ['olive oil', 4, 'tbsp'],
      ['basil', 1, 'cup'],
      ['vinegar', 2, 'tbsp'],
    ],
    steps: [
      'Cook and cool the pasta.',
      'Halve the tomatoes and crumble the feta.',
      'Toss everything with oil, vinegar and basil.',
    ],
  },
  {
    name: 'Overnight Oats',
    servings: 2,
    ingredients: [
      ['rolled oats', 100, 'g'],
      ['milk', 300, 'ml'],
      ['yogurt', 150, 'g'],
      ['honey', 1, 'tbsp'],
      ['berries', 1, 'cup'],
    ],
    steps: ['Stir oats, milk, yogurt and honey together.', 'Chill overnight.', 'Top with berries.'],
  },
];

const recipeScale = family({
  id: 'content.recipe-scale',
  category: CATEGORY,
  summary: 'scale a recipe to a headcount with unit conversion, as a Markdown card and a shopping-list CSV',
  difficulty: 'easy',
  skills: ['unit conversion', 'markdown', 'csv'],
  draw({ rng }) {
    const base = rng.pick(RECIPES);
    const jitter = (q: number, unit: string) => (unit === 'g' || unit === 'ml' ? q + 10 * rng.int(-3, 3) : q);
    const recipe = {
      ...base,
      ingredients: base.ingredients.map(
        ([item, q, unit]) => [item, jitter(q, unit), unit] as [string, number, string],
      ),
    };
    let guests = rng.int(10, 60);
    if (guests === recipe.servings) guests++;
    const scaled = recipe.ingredients.map(([item, q, unit]) => {
      let value = (q * guests) / recipe.servings;
      let u = unit;
      if ((unit === 'g' || unit === 'ml') && value >= 1000) {
        value = value / 1000;
        u = unit === 'g' ? 'kg' : 'l';
      }
      return { item, qty: pyFixed(value, 2), unit: u };
    });
    return {
      recipe,
      guests,
      scaled,
      title: `# ${recipe.name} (serves ${guests})`,
      inputPath: 'input/recipe.json',
      mdPath: `output/recipe_for_${guests}.md`,
      csvPath: 'output/shopping_list.csv',
    };
  },
  prompt: ({ recipe, guests, title, inputPath, mdPath, csvPath }, { persona }) => ({
    opening: `${persona.intro}. I'm cooking ${recipe.name} for ${guests} people at ${persona.event} and need the recipe scaled up.`,
    inputs: [[inputPath, 'the recipe: name, servings, ingredients (item, qty, unit) and steps']],
    steps: [
      `Scale every quantity by ${guests} / servings.`,
      'Convert g to kg and ml to l (divide by 1000) when the scaled amount is 1000 or more; other units stay as they are.',
      'Write quantities with exactly two decimals (e.g. 1.50).',
      `The recipe card starts with "${title}", then a "## Ingredients" section with one bullet "- <qty> <unit> <item>" per ingredient in the recipe's order, then a "## Method" section with the steps as a numbered list.`,
      'The shopping list has one row per ingredient, sorted by item name.',
    ],
    outputs: [
      [mdPath, 'the scaled recipe card'],
      [csvPath, 'columns item,quantity,unit'],
    ],
  }),
  late: ({ scaled }, rng) => ({ probes: rng.sample(scaled, 2) }),
  files: ({ recipe, inputPath }) => [
    {
      path: inputPath,
      content: `${JSON.stringify(
        {
          name: recipe.name,
          servings: recipe.servings,
          ingredients: recipe.ingredients.map(([item, qty, unit]) => ({ item, qty, unit })),
          steps: recipe.steps,
        },
        null,
        2,
      )}\n`,
    },
  ],
  checks: ({ recipe, scaled, title, probes, mdPath, csvPath }) => [
    check.nonEmpty('card_exists', mdPath),
    check.contains('card_title', mdPath, title),
    check.matches('card_sections_in_order', mdPath, inOrderRegex(['## Ingredients', '## Method'])),
    ...probes.map((s, i) =>
      check.contains(`ingredient_line_${i + 1}`, mdPath, `- ${s.qty} ${s.unit} ${s.item}`),
    ),
    check.matches('method_steps_in_order', mdPath, inOrderRegex(recipe.steps)),
    check.columns('shopping_list_columns', csvPath, ['item', 'quantity', 'unit']),
    check.rows(
      'shopping_list_rows',
      csvPath,
      ['item', 'quantity', 'unit'],
      [...scaled].sort((a, b) => byString(a.item, b.item)).map((s) => [s.item, s.qty, s.unit]),
      true,
    ),
  ],
  reference: ({ guests, inputPath, mdPath, csvPath }) => [
    act.read(inputPath),
    act.python(`${PY_READ_CSV}
r = json.load(open(${JSON.stringify(inputPath)}))
n = ${guests}
rows = []
for ing in r['ingredients']:
    q, unit = ing['qty'] * n / r['servings'], ing['unit']
    if unit in ('g', 'ml') and q >= 1000:
        q, unit = q / 1000, {'g': 'kg', 'ml': 'l'}[unit]
    rows.append([ing['item'], f'{q:.2f}', unit])
lines = [f"# {r['name']} (serves {n})", '', '## Ingredients', '']
lines += [f'- {q} {u} {item}' for item, q, u in rows]
lines += ['', '## Method', ''] + [f'{i}. {s}' for i, s in enumerate(r['steps'], 1)]
write_text(${JSON.stringify(mdPath)}, '\\n'.join(lines) + '\\n')
write_csv(${JSON.stringify(csvPath)}, ['item', 'quantity', 'unit'], sorted(rows))`),
    act.exec(`cat ${mdPath} ${csvPath}`),
  ],
  params: ({ recipe, guests }) => ({ recipe: recipe.name, guests }),
});

const TITLE_A = [
  'Measuring',
  'Rethinking',
  'Scaling',
  'Understanding',
  'Designing',
  'Forecasting',
  'Auditing',
];
const TITLE_B = [
  'volunteer retention',
  'small-batch production',
  'customer feedback loops',
  'inventory risk',
  'community engagement',
  'service reliability',
  'seasonal demand',
];
const TITLE_C = [
  'in small organizations',
  'across local markets',
  'with open data',
  'under uncertainty',
  'in practice',
];
const VENUES = [
  'Journal of Applied Operations',
  'Community Studies Quarterly',
  'Small Business Review',
  'Journal of Service Research',
  'Data & Society Letters',
];

interface Author {
  first: string;
  last: string;
}

interface Reference {
  authors: Author[];
  year: number;
  title: string;
  venue: string;
  volume: number;
  pages: string;
}

/** "Last, F." */
function authorName(a: Author): string {
  return `${a.last}, ${a.first[0]}.`;
}

/** A reference in APA style. */
function apa(r: Reference): string {
  const as = r.authors;
  const authors =
    as.length === 1
      ? authorName(as[0]!)
      : `${as.slice(0, -1).map(authorName).join(', ')}, & ${authorName(as.at(-1)!)}`;
  return `${authors} (${r.year}). ${r.title}. *${r.venue}*, ${r.volume}, ${r.pages}.`;
}

/** One reference per first author; co-authors never share the first author's last name. */
function drawReferences(rng: Rng): Reference[] {
  return rng.sample(LAST_NAMES, rng.int(5, 8)).map((last) => {
    const co = fullNames(rng, rng.int(0, 3)).filter((n) => !n.endsWith(` ${last}`));
    const authors = [
      { first: fullNames(rng, 1)[0]!.split(' ')[0]!, last },
      ...co.map((n) => ({ first: n.split(' ')[0]!, last: n.split(' ')[1]! })),
    ];
    const start = rng.int(1, 180);
    return {
      authors,
      year: rng.int(2005, 2024),
      title: `${rng.pick(TITLE_A)} ${rng.pick(TITLE_B)} ${rng.pick(TITLE_C)}`,
      venue: rng.pick(VENUES),
      volume: rng.int(3, 40),
      pages: `${start}-${start + rng.int(8, 30)}`,
    };
  });
}

const citations = family({
  id: 'content.citations',
  category: CATEGORY,
  summary: 'format a reference list in APA style, sorted by author, with citation keys',
  difficulty: 'medium',
  skills: ['citation styles', 'sorting', 'markdown'],
  draw({ rng }) {
    for (;;) {
      const refs = drawReferences(rng);
      const sorted = [...refs].sort(
        (a, b) => byString(a.authors[0]!.last, b.authors[0]!.last) || a.year - b.year,
      );
      const keys = sorted.map((r) => `${r.authors[0]!.last.toLowerCase()}${r.year}`).sort(byString);
      if (new Set(keys).size !== keys.length) continue;
      return {
        refs,
        sorted,
        keys,
        topic: rng.pick(TITLE_B),
        inputPath: 'input/references.json',
        mdPath: 'output/references.md',
        jsonPath: 'output/citation_keys.json',
      };
    }
  },
  prompt: ({ refs, topic, inputPath, mdPath, jsonPath }, { persona }) => ({
    opening: `${persona.intro}, and I'm finishing a short report on ${topic} for ${persona.org}'s board. Please format the ${refs.length} references.`,
    inputs: [
      [inputPath, 'a JSON list of references: authors (first, last), year, title, venue, volume, pages'],
    ],
    steps: [
      'Format each reference in APA style as "<authors> (<year>). <title>. *<venue>*, <volume>, <pages>."',
      'Authors are written "Last, F." (initial of the first name). Two or more authors: separate with ", " and put "& " before the last one, e.g. "Ito, K., Rossi, M., & Chen, L." (a comma before the & as well).',
      'Start the file with "# References"; list the references one per paragraph (blank line between them), sorted by the first author\'s last name, then year.',
      'Also write citation keys: "count" and "keys" — for each reference, the first author\'s last name in lower case followed by the year (e.g. "ito2019"), sorted alphabetically.',
    ],
    outputs: [
      [mdPath, 'the formatted list'],
      [jsonPath, 'the keys object'],
    ],
  }),
  late({ refs }, rng) {
    const probes = rng.sample(refs, 2);
    return { probes, shuffled: rng.shuffle(refs) };
  },
  files: ({ shuffled, inputPath }) => [
    { path: inputPath, content: `${JSON.stringify(shuffled, null, 2)}\n` },
  ],
  checks: ({ sorted, keys, probes, mdPath, jsonPath }) => [
    check.nonEmpty('references_exist', mdPath),
    check.contains('references_heading', mdPath, '# References'),
    ...probes.map((r, i) => check.contains(`formatted_reference_${i + 1}`, mdPath, apa(r))),
    check.matches(
      'sorted_by_first_author',
      mdPath,
      inOrderRegex(sorted.map((r) => `\n${r.authors[0]!.last}, `)),
    ),
    check.parses('keys_parse', jsonPath, 'json'),
    check.value('key_count', jsonPath, '/count', keys.length),
    check.value('keys_sorted', jsonPath, '/keys', keys),
  ],
  reference: ({ inputPath, mdPath, jsonPath }) => [
    act.read(inputPath),
    act.python(`${PY_READ_CSV}
refs = json.load(open(${JSON.stringify(inputPath)}))
def name(a):
    return f"{a['last']}, {a['first'][0]}."
def authors(l):
    return name(l[0]) if len(l) == 1 else ', '.join(name(a) for a in l[:-1]) + ', & ' + name(l[-1])
refs.sort(key=lambda r: (r['authors'][0]['last'], r['year']))
out = ['# References', '']
for r in refs:
    out += [f"{authors(r['authors'])} ({r['year']}). {r['title']}. *{r['venue']}*, {r['volume']}, {r['pages']}.", '']
write_text(${JSON.stringify(mdPath)}, '\\n'.join(out))
keys = sorted(r['authors'][0]['last'].lower() + str(r['year']) for r in refs)
write_json(${JSON.stringify(jsonPath)}, {'count': len(keys), 'keys': keys})`),
    act.exec(`cat ${mdPath}`),
  ],
  params: ({ refs }) => ({ references: refs.length }),
});

export const CONTENT_TEMPLATES: readonly TaskTemplate[] = [
  catalogPage,
  releaseNotes,
  glossary,
  recipeScale,
  citations,
];
