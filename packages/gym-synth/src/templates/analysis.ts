import { addDays, byString, cents, centsValue, pyFixed, toCsv } from '../format.js';
import type { Persona } from '../personas.js';
import type { Rng } from '../rng.js';
import {
  act,
  check,
  composePrompt,
  family,
  givenNames,
  type PromptParts,
  PY_READ_CSV,
  type TaskTemplate,
} from '../template.js';
import { someDate } from './productivity.js';

const CATEGORY = 'Analysis & Reasoning' as const;

/** The key of the single largest value, or null when the largest is shared. */
function uniqueMax(values: ReadonlyMap<string, number>): string | null {
  let best: string | null = null;
  let bestValue = Number.NEGATIVE_INFINITY;
  let shared = false;
  for (const [k, v] of values) {
    if (v > bestValue) {
      best = k;
      bestValue = v;
      shared = false;
    } else if (v === bestValue) shared = true;
  }
  return shared ? null : best;
}

function negate(values: ReadonlyMap<string, number>): Map<string, number> {
  return new Map([...values].map(([k, v]) => [k, -v]));
}

function add(map: Map<string, number>, key: string, n: number): void {
  map.set(key, (map.get(key) ?? 0) + n);
}

interface Order {
  date: string;
  region: string;
  product: string;
  units: number;
  price: number;
}

/** Orders, units and revenue (cents) per region; revenue per product and per month; the total. */
function salesTotals(orders: Order[]) {
  const byRegion = new Map<string, { orders: number; units: number; revenue: number }>();
  const byProduct = new Map<string, number>();
  const byMonth = new Map<string, number>();
  let total = 0;
  for (const o of orders) {
    const r = byRegion.get(o.region) ?? { orders: 0, units: 0, revenue: 0 };
    r.orders++;
    r.units += o.units;
    r.revenue += o.units * o.price;
    byRegion.set(o.region, r);
    add(byProduct, o.product, o.units * o.price);
    add(byMonth, o.date.slice(0, 7), o.units * o.price);
    total += o.units * o.price;
  }
  return { byRegion, byProduct, byMonth, total };
}

const salesByRegion = family({
  id: 'analysis.sales-by-region',
  category: CATEGORY,
  summary: 'aggregate order lines by region (orders, units, revenue), find the top product and best month',
  difficulty: 'easy',
  skills: ['csv', 'aggregation', 'money arithmetic'],
  draw({ rng, persona }) {
    for (;;) {
      const regions = rng.sample(persona.places, rng.int(3, 5));
      const products = rng
        .sample(persona.items, rng.int(4, 6))
        .map((name) => ({ name, price: rng.int(150, 9000) }));
      const start = someDate(rng);
      const orders: Order[] = Array.from({ length: rng.int(18, 36) }, () => {
        const p = rng.pick(products);
        return {
          date: addDays(start, rng.int(0, 80)),
          region: rng.pick(regions),
          product: p.name,
          units: rng.int(1, 12),
          price: p.price,
        };
      }).sort((a, b) => byString(a.date, b.date));
      const { byRegion, byProduct, byMonth, total } = salesTotals(orders);
      const top = uniqueMax(byProduct);
      const month = uniqueMax(byMonth);
      if (!top || !month) continue;
      return {
        regions,
        products,
        orders,
        table: [...byRegion].sort((a, b) => b[1].revenue - a[1].revenue || byString(a[0], b[0])),
        total,
        top,
        month,
        aov: total / 100 / orders.length,
        inputPath: 'input/sales.csv',
        csvPath: 'output/revenue_by_region.csv',
        jsonPath: 'output/sales_summary.json',
      };
    }
  },
  prompt: ({ regions, orders, inputPath, csvPath, jsonPath }, { persona }) => ({
    opening: `${persona.intro}. I need the sales numbers by region (${[...regions].sort().join(', ')}) for ${persona.org} from ${orders[0]!.date} to ${orders.at(-1)!.date}, before our planning meeting.`,
    inputs: [
      [
        inputPath,
        'one order line per row: date, region, product, units, unit_price (in dollars, two decimals)',
      ],
    ],
    steps: [
      'Revenue of a line is units * unit_price.',
      'Per region compute orders (number of lines), units (sum) and revenue (sum, two decimals). Sort regions by revenue descending (ties by region name).',
      'Summarize: "total_revenue" (number), "top_product" (product with the highest revenue), "best_month" (YYYY-MM with the highest revenue), "average_order_value" (total revenue / number of lines, rounded to 2 decimals).',
    ],
    outputs: [
      [csvPath, 'columns region,orders,units,revenue'],
      [jsonPath, 'the summary object'],
    ],
  }),
  files: ({ orders, inputPath }) => [
    {
      path: inputPath,
      content: toCsv(
        ['date', 'region', 'product', 'units', 'unit_price'],
        orders.map((o) => [o.date, o.region, o.product, o.units, cents(o.price)]),
      ),
    },
  ],
  checks: ({ table, total, top, month, aov, csvPath, jsonPath }) => [
    check.nonEmpty('region_table_exists', csvPath),
    check.parses('region_table_parses', csvPath, 'csv'),
    check.columns('region_table_columns', csvPath, ['region', 'orders', 'units', 'revenue']),
    check.rows(
      'region_rows_by_revenue',
      csvPath,
      ['region', 'orders', 'units', 'revenue'],
      table.map(([k, v]) => [k, String(v.orders), String(v.units), cents(v.revenue)]),
      true,
    ),
    check.parses('summary_parses', jsonPath, 'json'),
    check.value('total_revenue', jsonPath, '/total_revenue', centsValue(total), 0.005),
    check.value('top_product', jsonPath, '/top_product', top),
    check.value('best_month', jsonPath, '/best_month', month),
    check.value('average_order_value', jsonPath, '/average_order_value', Number(pyFixed(aov, 2)), 0.0051),
  ],
  reference: ({ inputPath, csvPath, jsonPath }) => [
    act.read(inputPath),
    act.python(`${PY_READ_CSV}
rows = read_csv(${JSON.stringify(inputPath)})
regions, products, months = {}, {}, {}
total = 0
for r in rows:
    c = int(r['units']) * round(float(r['unit_price']) * 100)
    g = regions.setdefault(r['region'], [0, 0, 0])
    g[0] += 1
    g[1] += int(r['units'])
    g[2] += c
    products[r['product']] = products.get(r['product'], 0) + c
    months[r['date'][:7]] = months.get(r['date'][:7], 0) + c
    total += c
table = sorted(regions.items(), key=lambda kv: (-kv[1][2], kv[0]))
write_csv(${JSON.stringify(csvPath)}, ['region', 'orders', 'units', 'revenue'], [[k, v[0], v[1], f'{v[2] / 100:.2f}'] for k, v in table])
write_json(${JSON.stringify(jsonPath)}, {'total_revenue': total / 100, 'top_product': max(products, key=products.get),
    'best_month': max(months, key=months.get), 'average_order_value': round(total / 100 / len(rows), 2)})`),
    act.exec(`cat ${csvPath} ${jsonPath}`),
  ],
  params: ({ orders, regions, products }) => ({
    orders: orders.length,
    regions: regions.length,
    products: products.length,
  }),
});

const ASSIGNMENTS = ['hw1', 'hw2', 'quiz', 'lab', 'project', 'midterm', 'final'];
const LETTERS: Array<[string, number]> = [
  ['A', 90],
  ['B', 80],
  ['C', 70],
  ['D', 60],
  ['F', 0],
];
const COURSES = [
  'Biology 101',
  'Intro Chemistry',
  'Physics Lab',
  'Earth Science',
  'Statistics Basics',
  'Data Literacy',
];

/** Weighted scores (in hundredths, exact) and letters, with the class's mean, median and letter counts. */
function gradeResults(students: string[], scores: number[][], weights: number[]) {
  const results = students.map((student, i) => {
    const k = scores[i]!.reduce((sum, v, j) => sum + v * weights[j]!, 0);
    const letter = LETTERS.find(([, min]) => k >= min * 100)![0];
    return { student, k, weighted: k / 100, letter };
  });
  const sortedK = results.map((r) => r.k).sort((a, b) => a - b);
  const mid = sortedK.length >> 1;
  return {
    ranked: [...results].sort((a, b) => b.k - a.k || byString(a.student, b.student)),
    counts: Object.fromEntries(LETTERS.map(([l]) => [l, results.filter((r) => r.letter === l).length])),
    mean: results.reduce((s, r) => s + r.k, 0) / (100 * results.length),
    median: sortedK.length % 2 === 1 ? sortedK[mid]! / 100 : (sortedK[mid - 1]! + sortedK[mid]!) / 200,
  };
}

const gradeReport = family({
  id: 'analysis.grade-report',
  category: CATEGORY,
  summary: 'weighted course grades with letter bands, a ranked CSV and class statistics',
  difficulty: 'medium',
  skills: ['csv', 'weighted averages', 'statistics'],
  draw({ rng }) {
    for (;;) {
      const parts = ASSIGNMENTS.filter(() => rng.chance(0.6));
      if (parts.length < 3) continue;
      let left = 100;
      const weights = parts.map((_, i) => {
        if (i === parts.length - 1) return left;
        const w = 5 * rng.int(2, Math.max(2, Math.min(8, Math.floor(left / 5) - 2 * (parts.length - i - 1))));
        left -= w;
        return w;
      });
      if (left <= 0 || weights.some((w) => w <= 0)) continue;
      const students = givenNames(rng, rng.int(8, 14));
      const skill = new Map(students.map((s) => [s, rng.int(50, 95)]));
      const scores = students.map((s) =>
        parts.map(() => Math.max(0, Math.min(100, skill.get(s)! + rng.int(-15, 15)))),
      );
      const grades = gradeResults(students, scores, weights);
      if (grades.ranked[0]!.k === grades.ranked[1]!.k) continue;
      return {
        parts,
        weights,
        students,
        scores,
        ...grades,
        course: rng.pick(COURSES),
        scoresPath: 'input/scores.csv',
        weightsPath: 'input/weights.json',
        csvPath: 'output/grades.csv',
        jsonPath: 'output/class_stats.json',
      };
    }
  },
  prompt: ({ parts, course, scoresPath, weightsPath, csvPath, jsonPath }, { persona }) => ({
    opening: `${persona.intro}, and I also teach an evening ${course} course for ${persona.org}'s community program. Term is over and I need final grades.`,
    inputs: [
      [scoresPath, `one row per student: student, ${parts.join(', ')} (scores 0-100)`],
      [weightsPath, 'the weight of each column in percent (they add up to 100)'],
    ],
    steps: [
      'Weighted score = sum of score * weight / 100 over the columns.',
      'Letter grade from the weighted score: A >= 90, B >= 80, C >= 70, D >= 60, otherwise F.',
      'Rank students by weighted score descending (ties by name) and write student, weighted (one decimal), letter.',
      'Class statistics: "mean" and "median" of the weighted scores (2 decimals), "top_student", and "grade_counts" with all five letters (0 when unused).',
    ],
    outputs: [
      [csvPath, 'columns student,weighted,letter'],
      [jsonPath, 'the statistics object'],
    ],
  }),
  files: ({ parts, weights, students, scores, scoresPath, weightsPath }) => [
    {
      path: scoresPath,
      content: toCsv(
        ['student', ...parts],
        students.map((s, i) => [s, ...scores[i]!]),
      ),
    },
    {
      path: weightsPath,
      content: `${JSON.stringify(Object.fromEntries(parts.map((p, i) => [p, weights[i]!])), null, 2)}\n`,
    },
  ],
  checks: ({ ranked, counts, mean, median, csvPath, jsonPath }) => [
    check.nonEmpty('grades_exists', csvPath),
    check.columns('grades_columns', csvPath, ['student', 'weighted', 'letter']),
    check.rows(
      'grades_ranked',
      csvPath,
      ['student', 'weighted', 'letter'],
      ranked.map((r) => [r.student, pyFixed(r.weighted, 1), r.letter]),
      true,
    ),
    check.parses('stats_parses', jsonPath, 'json'),
    check.keys('stats_keys', jsonPath, ['mean', 'median', 'top_student', 'grade_counts']),
    // Half-cent ties may round either way depending on float summation order: allow one cent.
    check.value('mean', jsonPath, '/mean', Number(pyFixed(mean, 2)), 0.0101),
    check.value('median', jsonPath, '/median', Number(pyFixed(median, 2)), 0.0101),
    check.value('top_student', jsonPath, '/top_student', ranked[0]!.student),
    check.value('grade_counts', jsonPath, '/grade_counts', counts),
  ],
  reference: ({ scoresPath, weightsPath, csvPath, jsonPath }) => [
    act.read(scoresPath),
    act.read(weightsPath),
    act.python(`${PY_READ_CSV}
import statistics
rows = read_csv(${JSON.stringify(scoresPath)})
weights = json.load(open(${JSON.stringify(weightsPath)}))
def letter(x):
    return 'A' if x >= 90 else 'B' if x >= 80 else 'C' if x >= 70 else 'D' if x >= 60 else 'F'
res = []
for r in rows:
    w = sum(int(r[k]) * v for k, v in weights.items()) / 100
    res.append((r['student'], w, letter(w)))
res.sort(key=lambda t: (-t[1], t[0]))
write_csv(${JSON.stringify(csvPath)}, ['student', 'weighted', 'letter'], [[s, f'{w:.1f}', l] for s, w, l in res])
vals = [w for _, w, _ in res]
write_json(${JSON.stringify(jsonPath)}, {'mean': round(statistics.mean(vals), 2), 'median': round(statistics.median(vals), 2),
    'top_student': res[0][0], 'grade_counts': {g: sum(1 for t in res if t[2] == g) for g in 'ABCDF'}})`),
    act.exec(`head -n 5 ${csvPath}; cat ${jsonPath}`),
  ],
  params: ({ students, parts }) => ({ students: students.length, columns: parts.length }),
});

interface Response {
  id: string;
  group: string;
  score: number | null;
  recommend: string;
}

/** Per group (by name): responses, scored responses, their score sum and average, and the recommend share. */
function surveyStats(groups: string[], rows: Response[]) {
  return groups
    .map((g) => {
      const mine = rows.filter((r) => r.group === g);
      const scored = mine.filter((r) => r.score !== null);
      const sum = scored.reduce((s, r) => s + r.score!, 0);
      const yes = mine.filter((r) => r.recommend === 'yes').length;
      return {
        g,
        responses: mine.length,
        scored: scored.length,
        sum,
        avg: sum / scored.length,
        pct: (yes * 100) / mine.length,
      };
    })
    .sort((a, b) => byString(a.g, b.g));
}

const surveyCrosstab = family({
  id: 'analysis.survey-crosstab',
  category: CATEGORY,
  summary:
    'cross-tabulate survey responses per group (blank scores excluded from averages) and name the extremes',
  difficulty: 'medium',
  skills: ['csv', 'grouping', 'missing data'],
  draw({ rng, persona }) {
    for (;;) {
      const groups = rng.sample(persona.places, rng.int(3, 4));
      const mood = new Map(groups.map((g) => [g, rng.int(1, 4)]));
      const rows: Response[] = Array.from({ length: rng.int(20, 34) }, (_, i) => {
        const group = rng.pick(groups);
        const blank = rng.chance(0.12);
        const score = Math.max(1, Math.min(5, mood.get(group)! + rng.int(0, 2)));
        return {
          id: `R${String(i + 1).padStart(3, '0')}`,
          group,
          score: blank ? null : score,
          recommend: rng.chance(score / 6) ? 'yes' : 'no',
        };
      });
      const stats = surveyStats(groups, rows);
      if (stats.some((s) => s.scored === 0)) continue;
      // Compare averages exactly (sum_a * n_b vs sum_b * n_a).
      const cmp = (a: (typeof stats)[number], b: (typeof stats)[number]) =>
        a.sum * b.scored - b.sum * a.scored;
      const byAvg = [...stats].sort(cmp);
      if (cmp(byAvg[0]!, byAvg[1]!) === 0 || cmp(byAvg.at(-1)!, byAvg.at(-2)!) === 0) continue;
      const scores = rows.flatMap((r) => (r.score === null ? [] : [r.score]));
      return {
        groups,
        rows,
        stats,
        blank: rows.length - scores.length,
        overall: scores.reduce((s, x) => s + x, 0) / scores.length,
        most: byAvg.at(-1)!.g,
        least: byAvg[0]!.g,
        inputPath: 'input/responses.csv',
        csvPath: 'output/crosstab.csv',
        jsonPath: 'output/insights.json',
      };
    }
  },
  prompt: ({ groups, rows, inputPath, csvPath, jsonPath }, { persona }) => ({
    opening: `${persona.intro}. We ran a short satisfaction survey at ${[...groups].sort().join(', ')} (${rows.length} responses) and I'd like a breakdown per location.`,
    inputs: [
      [inputPath, 'columns respondent_id, location, satisfaction (1-5, may be blank), recommend (yes/no)'],
    ],
    steps: [
      'A blank satisfaction is excluded from averages but the response still counts everywhere else.',
      'Per location: responses (count), avg_satisfaction (2 decimals), recommend_pct (share of "yes" among the responses * 100, one decimal). Rows sorted by location name.',
      'Insights: "total_responses", "blank_scores" (number of blank satisfaction cells), "overall_avg" (over all non-blank scores, 2 decimals), "most_satisfied" and "least_satisfied" (locations with the highest and lowest average).',
    ],
    outputs: [
      [csvPath, 'columns location,responses,avg_satisfaction,recommend_pct'],
      [jsonPath, 'the insights object'],
    ],
  }),
  files: ({ rows, inputPath }) => [
    {
      path: inputPath,
      content: toCsv(
        ['respondent_id', 'location', 'satisfaction', 'recommend'],
        rows.map((r) => [r.id, r.group, r.score ?? '', r.recommend]),
      ),
    },
  ],
  checks: ({ rows, stats, blank, overall, most, least, csvPath, jsonPath }) => [
    check.nonEmpty('crosstab_exists', csvPath),
    check.columns('crosstab_columns', csvPath, [
      'location',
      'responses',
      'avg_satisfaction',
      'recommend_pct',
    ]),
    check.rows(
      'crosstab_rows',
      csvPath,
      ['location', 'responses', 'avg_satisfaction', 'recommend_pct'],
      stats.map((s) => [s.g, String(s.responses), pyFixed(s.avg, 2), pyFixed(s.pct, 1)]),
      true,
    ),
    check.parses('insights_parses', jsonPath, 'json'),
    check.value('total_responses', jsonPath, '/total_responses', rows.length),
    check.value('blank_scores', jsonPath, '/blank_scores', blank),
    check.value('overall_avg', jsonPath, '/overall_avg', Number(pyFixed(overall, 2)), 0.0051),
    check.value('most_satisfied', jsonPath, '/most_satisfied', most),
    check.value('least_satisfied', jsonPath, '/least_satisfied', least),
  ],
  reference: ({ inputPath, csvPath, jsonPath }) => [
    act.read(inputPath),
    act.python(`${PY_READ_CSV}
rows = read_csv(${JSON.stringify(inputPath)})
groups = {}
for r in rows:
    g = groups.setdefault(r['location'], {'n': 0, 'scores': [], 'yes': 0})
    g['n'] += 1
    if r['satisfaction'].strip():
        g['scores'].append(int(r['satisfaction']))
    g['yes'] += r['recommend'] == 'yes'
avg = {k: sum(g['scores']) / len(g['scores']) for k, g in groups.items()}
write_csv(${JSON.stringify(csvPath)}, ['location', 'responses', 'avg_satisfaction', 'recommend_pct'],
    [[k, g['n'], f"{avg[k]:.2f}", f"{g['yes'] * 100 / g['n']:.1f}"] for k, g in sorted(groups.items())])
scores = [s for g in groups.values() for s in g['scores']]
write_json(${JSON.stringify(jsonPath)}, {'total_responses': len(rows), 'blank_scores': len(rows) - len(scores),
    'overall_avg': round(sum(scores) / len(scores), 2), 'most_satisfied': max(avg, key=avg.get), 'least_satisfied': min(avg, key=avg.get)})`),
    act.exec(`cat ${csvPath} ${jsonPath}`),
  ],
  params: ({ rows, groups }) => ({ responses: rows.length, groups: groups.length }),
});

interface StockItem {
  sku: string;
  name: string;
  onHand: number;
  reorderPoint: number;
  caseSize: number;
  unitCost: number;
}

/** The items to reorder, by cost descending: enough whole cases to reach twice the reorder point. */
function reorderPlan(items: StockItem[], incoming: Array<{ sku: string; qty: number }>) {
  return items
    .map((it) => {
      const available = it.onHand + incoming.filter((x) => x.sku === it.sku).reduce((s, x) => s + x.qty, 0);
      if (available >= it.reorderPoint) return null;
      const need = 2 * it.reorderPoint - available;
      const qty = Math.ceil(need / it.caseSize) * it.caseSize;
      return { ...it, available, qty, cost: qty * it.unitCost };
    })
    .filter((x) => x !== null)
    .sort((a, b) => b.cost - a.cost || byString(a.sku, b.sku));
}

const inventoryReorder = family({
  id: 'analysis.inventory-reorder',
  category: CATEGORY,
  summary: 'decide reorder quantities from stock, incoming orders, reorder points and case sizes',
  difficulty: 'medium',
  skills: ['csv', 'inventory', 'integer arithmetic'],
  draw({ rng, persona }) {
    for (;;) {
      const names = rng.sample(persona.items, rng.int(6, 8));
      const items: StockItem[] = names.map((name, i) => ({
        sku: `${persona.id.slice(0, 3).toUpperCase()}-${String(100 + i * 7 + rng.int(0, 6))}`,
        name,
        onHand: rng.int(0, 60),
        reorderPoint: rng.int(10, 50),
        caseSize: rng.pick([1, 6, 10, 12, 24]),
        unitCost: rng.int(80, 4500),
      }));
      const incoming: Array<{ sku: string; qty: number }> = [];
      for (const it of items) {
        const k = rng.chance(0.5) ? rng.int(1, 2) : 0;
        for (let j = 0; j < k; j++) incoming.push({ sku: it.sku, qty: rng.int(1, 20) });
      }
      const plan = reorderPlan(items, incoming);
      if (plan.length < 2) continue;
      return {
        items,
        incoming,
        plan,
        total: plan.reduce((s, p) => s + p.cost, 0),
        stockPath: 'input/stock.csv',
        incomingPath: 'input/incoming.csv',
        csvPath: 'output/reorder.csv',
        jsonPath: 'output/reorder_summary.json',
      };
    }
  },
  prompt: ({ items, stockPath, incomingPath, csvPath, jsonPath }, { persona }) => ({
    opening: `${persona.intro}. I place supplier orders on Fridays; tell me which of our ${items.length} stock items to reorder this week.`,
    inputs: [
      [stockPath, 'columns sku, name, on_hand, reorder_point, case_size, unit_cost (dollars)'],
      [incomingPath, 'deliveries already on the way: sku, qty (a sku may appear more than once)'],
    ],
    steps: [
      'available = on_hand + all incoming qty for the sku.',
      'Reorder a sku only when available < reorder_point. Order enough to bring available up to at least twice the reorder point, rounded up to whole cases: order_qty = the smallest multiple of case_size >= 2 * reorder_point - available.',
      'cost = order_qty * unit_cost. Sort by cost descending, then sku.',
      'Summary: "skus_to_reorder", "total_cost" (number) and "largest_order_sku" (the sku of the first row).',
    ],
    outputs: [
      [csvPath, 'columns sku,name,available,order_qty,cost (cost with two decimals)'],
      [jsonPath, 'the summary object'],
    ],
  }),
  late: ({ incoming }, rng) => ({ incomingRows: rng.shuffle(incoming) }),
  files: ({ items, incomingRows, stockPath, incomingPath }) => [
    {
      path: stockPath,
      content: toCsv(
        ['sku', 'name', 'on_hand', 'reorder_point', 'case_size', 'unit_cost'],
        items.map((it) => [it.sku, it.name, it.onHand, it.reorderPoint, it.caseSize, cents(it.unitCost)]),
      ),
    },
    {
      path: incomingPath,
      content: toCsv(
        ['sku', 'qty'],
        incomingRows.map((x) => [x.sku, x.qty]),
      ),
    },
  ],
  checks: ({ plan, total, csvPath, jsonPath }) => [
    check.nonEmpty('reorder_exists', csvPath),
    check.columns('reorder_columns', csvPath, ['sku', 'name', 'available', 'order_qty', 'cost']),
    check.rows(
      'reorder_rows_by_cost',
      csvPath,
      ['sku', 'name', 'available', 'order_qty', 'cost'],
      plan.map((p) => [p.sku, p.name, String(p.available), String(p.qty), cents(p.cost)]),
      true,
    ),
    check.parses('summary_parses', jsonPath, 'json'),
    check.value('skus_to_reorder', jsonPath, '/skus_to_reorder', plan.length),
    check.value('total_cost', jsonPath, '/total_cost', centsValue(total), 0.005),
    check.value('largest_order_sku', jsonPath, '/largest_order_sku', plan[0]!.sku),
  ],
  reference: ({ stockPath, incomingPath, csvPath, jsonPath }) => [
    act.read(stockPath),
    act.read(incomingPath),
    act.python(`${PY_READ_CSV}
stock = read_csv(${JSON.stringify(stockPath)})
incoming = {}
for r in read_csv(${JSON.stringify(incomingPath)}):
    incoming[r['sku']] = incoming.get(r['sku'], 0) + int(r['qty'])
plan = []
for s in stock:
    avail = int(s['on_hand']) + incoming.get(s['sku'], 0)
    rp, case = int(s['reorder_point']), int(s['case_size'])
    if avail < rp:
        qty = -(-(2 * rp - avail) // case) * case
        plan.append([s['sku'], s['name'], avail, qty, qty * round(float(s['unit_cost']) * 100)])
plan.sort(key=lambda p: (-p[4], p[0]))
write_csv(${JSON.stringify(csvPath)}, ['sku', 'name', 'available', 'order_qty', 'cost'], [p[:4] + [f'{p[4] / 100:.2f}'] for p in plan])
write_json(${JSON.stringify(jsonPath)}, {'skus_to_reorder': len(plan), 'total_cost': sum(p[4] for p in plan) / 100, 'largest_order_sku': plan[0][0]})`),
    act.exec(`cat ${csvPath}`),
  ],
  params: ({ items, plan }) => ({ skus: items.length, reorders: plan.length }),
});

/** A percentage with one decimal and its sign: "+12.5", "-30.0". */
function signedPct(x: number): string {
  return x >= 0 ? `+${pyFixed(x, 1)}` : pyFixed(x, 1);
}

interface DailyMetric {
  date: string;
  visits: number;
  signups: number;
}

/** Days with a random walk of visits: mostly small moves, some big swings. */
function drawMetrics(rng: Rng, start: string, days: number): DailyMetric[] {
  let v = rng.int(300, 2000);
  return Array.from({ length: days }, (_, i) => {
    const swing = rng.chance(0.2) ? rng.int(-60, 80) : rng.int(-12, 12);
    v = Math.max(50, Math.round(v * (1 + swing / 100)));
    return { date: addDays(start, i), visits: v, signups: rng.int(0, Math.max(1, Math.floor(v / 12))) };
  });
}

const metricAnomalies = family({
  id: 'analysis.metric-anomalies',
  category: CATEGORY,
  summary:
    'flag day-over-day swings above a threshold in a daily metrics CSV; largest drop, best conversion day',
  difficulty: 'medium',
  skills: ['time series', 'percentages', 'csv'],
  draw({ rng }) {
    for (;;) {
      const threshold = rng.pick([20, 25, 30, 40]);
      const start = someDate(rng);
      const days = rng.int(14, 28);
      const rows = drawMetrics(rng, start, days);
      const changes = rows.slice(1).map((r, i) => {
        const prev = rows[i]!.visits;
        return {
          ...r,
          prev,
          flagged: Math.abs(r.visits - prev) * 100 > threshold * prev,
          pct: ((r.visits - prev) * 100) / prev,
        };
      });
      const flagged = changes.filter((c) => c.flagged);
      // Largest drop: most negative (visits - prev) / prev, compared exactly.
      const dropCmp = (a: (typeof changes)[number], b: (typeof changes)[number]) =>
        (a.visits - a.prev) * b.prev - (b.visits - b.prev) * a.prev;
      const drops = [...changes].sort(dropCmp);
      const convCmp = (a: DailyMetric, b: DailyMetric) => b.signups * a.visits - a.signups * b.visits;
      const conv = [...rows].sort(convCmp);
      if (
        flagged.length < 2 ||
        flagged.length > 10 ||
        dropCmp(drops[0]!, drops[1]!) === 0 ||
        drops[0]!.visits >= drops[0]!.prev
      )
        continue;
      if (convCmp(conv[0]!, conv[1]!) === 0) continue;
      return {
        threshold,
        rows,
        flagged,
        dropDate: drops[0]!.date,
        bestDate: conv[0]!.date,
        metric: rng.pick(['website visits', 'app sessions', 'booking page views', 'newsletter clicks']),
        inputPath: 'input/daily_metrics.csv',
        csvPath: 'output/anomalies.csv',
        jsonPath: 'output/anomaly_summary.json',
      };
    }
  },
  prompt: ({ threshold, metric, inputPath, csvPath, jsonPath }, { persona }) => ({
    opening: `${persona.intro}. Our ${metric} jumped around a lot recently and I want to know which days were unusual.`,
    inputs: [[inputPath, 'columns date, visits, signups (one row per day, in date order)']],
    steps: [
      `A day is an anomaly when its visits changed by strictly more than ${threshold}% compared with the previous day (|visits - previous| / previous * 100 > ${threshold}). The first day has no previous day.`,
      'For each anomaly write date, visits, previous (the previous day\'s visits) and change_pct ((visits - previous) / previous * 100, one decimal, with a sign: "+12.5" or "-30.0"), in date order.',
      'Summary: "days" (rows), "anomalies" (count), "largest_drop_date" (the day with the most negative change, anomaly or not) and "best_conversion_date" (the day with the highest signups / visits).',
    ],
    outputs: [
      [csvPath, 'columns date,visits,previous,change_pct'],
      [jsonPath, 'the summary object'],
    ],
  }),
  files: ({ rows, inputPath }) => [
    {
      path: inputPath,
      content: toCsv(
        ['date', 'visits', 'signups'],
        rows.map((r) => [r.date, r.visits, r.signups]),
      ),
    },
  ],
  checks: ({ rows, flagged, dropDate, bestDate, csvPath, jsonPath }) => [
    check.nonEmpty('anomalies_exists', csvPath),
    check.columns('anomalies_columns', csvPath, ['date', 'visits', 'previous', 'change_pct']),
    check.rows(
      'anomaly_rows',
      csvPath,
      ['date', 'visits', 'previous', 'change_pct'],
      flagged.map((c) => [c.date, String(c.visits), String(c.prev), signedPct(c.pct)]),
      true,
    ),
    check.parses('summary_parses', jsonPath, 'json'),
    check.value('days', jsonPath, '/days', rows.length),
    check.value('anomaly_count', jsonPath, '/anomalies', flagged.length),
    check.value('largest_drop_date', jsonPath, '/largest_drop_date', dropDate),
    check.value('best_conversion_date', jsonPath, '/best_conversion_date', bestDate),
  ],
  reference: ({ threshold, inputPath, csvPath, jsonPath }) => [
    act.read(inputPath),
    act.python(`${PY_READ_CSV}
rows = read_csv(${JSON.stringify(inputPath)})
T = ${threshold}
out, changes = [], []
for prev, r in zip(rows, rows[1:]):
    p, v = int(prev['visits']), int(r['visits'])
    pct = (v - p) * 100 / p
    changes.append((pct, r['date']))
    if abs(v - p) * 100 > T * p:
        out.append([r['date'], v, p, f'{pct:+.1f}'])
write_csv(${JSON.stringify(csvPath)}, ['date', 'visits', 'previous', 'change_pct'], out)
best = max(rows, key=lambda r: int(r['signups']) / int(r['visits']))
write_json(${JSON.stringify(jsonPath)}, {'days': len(rows), 'anomalies': len(out), 'largest_drop_date': min(changes)[1], 'best_conversion_date': best['date']})`),
    act.exec(`cat ${csvPath} ${jsonPath}`),
  ],
  params: ({ rows, threshold, flagged }) => ({ days: rows.length, threshold, anomalies: flagged.length }),
});

const EXPENSE_KINDS = [
  'Groceries',
  'Taxi',
  'Dinner',
  'Museum tickets',
  'Fuel',
  'Coffee run',
  'Supplies',
  'Train tickets',
  'Parking',
];

interface Expense {
  date: string;
  description: string;
  paidBy: string;
  amount: number;
  split: string[];
}

/** Paid, share and net per person, in cents; the first listed person's share absorbs the leftover cents. */
function balances(people: string[], expenses: Expense[]) {
  const paid = new Map(people.map((p) => [p, 0]));
  const share = new Map(people.map((p) => [p, 0]));
  for (const e of expenses) {
    add(paid, e.paidBy, e.amount);
    const each = Math.floor(e.amount / e.split.length);
    e.split.forEach((p, i) => {
      add(share, p, i === 0 ? e.amount - each * (e.split.length - 1) : each);
    });
  }
  const net = new Map(people.map((p) => [p, paid.get(p)! - share.get(p)!]));
  return { paid, share, net };
}

const EXPENSE_PATHS = {
  inputPath: 'input/expenses.csv',
  csvPath: 'output/balances.csv',
  jsonPath: 'output/settlement.json',
};

function expensePrompt(persona: Persona, people: string[]): PromptParts {
  const { inputPath, csvPath, jsonPath } = EXPENSE_PATHS;
  return {
    opening: `${persona.intro}. ${[...people].sort().join(', ')} from ${persona.org} shared costs during ${persona.event} and I'm the one who has to settle up.`,
    inputs: [
      [
        inputPath,
        'columns date, description, paid_by, amount (dollars), split_between (names separated by ";")',
      ],
    ],
    steps: [
      "Work in cents. Each expense is shared equally by the people in split_between: everyone's share is floor(amount / n) cents, except the first listed person, whose share also absorbs the leftover cents (amount - (n - 1) * floor(amount / n)).",
      'For every person: paid (total they paid), share (total of their shares), net = paid - share.',
      'Write one row per person sorted by net descending (ties by name), money with two decimals.',
      'Summary: "total_spent", "largest_creditor" (highest net) and "largest_debtor" (lowest net).',
    ],
    outputs: [
      [csvPath, 'columns person,paid,share,net'],
      [jsonPath, 'the summary object'],
    ],
  };
}

const expenseBalances = family({
  id: 'analysis.expense-balances',
  category: CATEGORY,
  summary:
    'split shared expenses in cents (remainder to the first listed person) and compute who is owed what',
  difficulty: 'hard',
  skills: ['money arithmetic', 'csv', 'reasoning'],
  draw({ rng, persona }) {
    for (;;) {
      const people = givenNames(rng, rng.int(3, 5));
      const start = someDate(rng);
      const expenses: Expense[] = Array.from({ length: rng.int(6, 12) }, (_, i) => {
        const split = rng.sample(people, rng.int(2, people.length));
        return {
          date: addDays(start, Math.floor(i / 2)),
          description: rng.pick(EXPENSE_KINDS),
          paidBy: rng.pick(people),
          amount: rng.int(500, 25000),
          split,
        };
      });
      const { paid, share, net } = balances(people, expenses);
      const creditor = uniqueMax(net);
      const debtor = uniqueMax(negate(net));
      if (!creditor || !debtor) continue;
      const table = [...people].sort((a, b) => net.get(b)! - net.get(a)! || byString(a, b));
      // This draw used to be rejected only after its prompt was composed: compose it here too, so
      // the next draw starts where it always did.
      if (table.some((p) => paid.get(p)! === 0 && share.get(p)! === 0)) {
        composePrompt(rng, expensePrompt(persona, people));
        continue;
      }
      return {
        people,
        expenses,
        paid,
        share,
        net,
        creditor,
        debtor,
        table,
        total: expenses.reduce((s, e) => s + e.amount, 0),
        ...EXPENSE_PATHS,
      };
    }
  },
  prompt: ({ people }, { persona }) => expensePrompt(persona, people),
  files: ({ expenses, inputPath }) => [
    {
      path: inputPath,
      content: toCsv(
        ['date', 'description', 'paid_by', 'amount', 'split_between'],
        expenses.map((e) => [e.date, e.description, e.paidBy, cents(e.amount), e.split.join(';')]),
      ),
    },
  ],
  checks: ({ paid, share, net, creditor, debtor, table, total, csvPath, jsonPath }) => [
    check.nonEmpty('balances_exists', csvPath),
    check.columns('balances_columns', csvPath, ['person', 'paid', 'share', 'net']),
    check.rows(
      'balances_rows_by_net',
      csvPath,
      ['person', 'paid', 'share', 'net'],
      table.map((p) => [p, cents(paid.get(p)!), cents(share.get(p)!), cents(net.get(p)!)]),
      true,
    ),
    check.parses('settlement_parses', jsonPath, 'json'),
    check.value('total_spent', jsonPath, '/total_spent', centsValue(total), 0.005),
    check.value('largest_creditor', jsonPath, '/largest_creditor', creditor),
    check.value('largest_debtor', jsonPath, '/largest_debtor', debtor),
  ],
  reference: ({ inputPath, csvPath, jsonPath }) => [
    act.read(inputPath),
    act.python(`${PY_READ_CSV}
rows = read_csv(${JSON.stringify(inputPath)})
paid, share = {}, {}
for r in rows:
    amount = round(float(r['amount']) * 100)
    names = r['split_between'].split(';')
    each = amount // len(names)
    paid[r['paid_by']] = paid.get(r['paid_by'], 0) + amount
    for i, n in enumerate(names):
        share[n] = share.get(n, 0) + (amount - each * (len(names) - 1) if i == 0 else each)
people = sorted(set(paid) | set(share))
net = {p: paid.get(p, 0) - share.get(p, 0) for p in people}
def money(c):
    return ('-' if c < 0 else '') + f'{abs(c) // 100}.{abs(c) % 100:02d}'
table = sorted(people, key=lambda p: (-net[p], p))
write_csv(${JSON.stringify(csvPath)}, ['person', 'paid', 'share', 'net'], [[p, money(paid.get(p, 0)), money(share.get(p, 0)), money(net[p])] for p in table])
write_json(${JSON.stringify(jsonPath)}, {'total_spent': sum(paid.values()) / 100, 'largest_creditor': table[0], 'largest_debtor': table[-1]})`),
    act.exec(`cat ${csvPath} ${jsonPath}`),
  ],
  params: ({ people, expenses }) => ({ people: people.length, expenses: expenses.length }),
});

export const ANALYSIS_TEMPLATES: readonly TaskTemplate[] = [
  salesByRegion,
  gradeReport,
  surveyCrosstab,
  inventoryReorder,
  metricAnomalies,
  expenseBalances,
];
