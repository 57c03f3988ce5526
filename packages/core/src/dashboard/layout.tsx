import type { Child } from 'hono/jsx';

/*
 * The page shell every dashboard page renders into: a header with the navigation, the page, and the
 * shared stylesheet and script. Pages are server-rendered from the real store; the script only adds
 * what must be live (charts, the event stream) on top of HTML that already shows the numbers.
 */

export const NAV = [
  { href: '/dashboard', label: 'Overview' },
  { href: '/dashboard/events', label: 'Events' },
  { href: '/dashboard/trajectories', label: 'Trajectories' },
  { href: '/dashboard/batches', label: 'Batches' },
  { href: '/dashboard/mismatch', label: 'Mismatch' },
  { href: '/dashboard/gym', label: 'Gym' },
] as const;

export interface PageProps {
  title: string;
  /** The nav entry to mark as current. */
  current: (typeof NAV)[number]['href'] | null;
  children: Child;
  /** Extra scripts (served from /dashboard/assets). */
  scripts?: string[];
}

export function Page({ title, current, children, scripts = [] }: PageProps) {
  return (
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>{`${title} · Stepwise`}</title>
        <link rel="icon" href="data:," />
        <link rel="stylesheet" href="/dashboard/assets/dashboard.css" />
        <link rel="stylesheet" href="/dashboard/assets/uPlot.min.css" />
      </head>
      <body>
        <a class="skip" href="#main">
          Skip to content
        </a>
        <header>
          <span class="brand">Stepwise</span>
          <nav aria-label="Dashboard">
            {NAV.map((n) => (
              <a href={n.href} aria-current={n.href === current ? 'page' : undefined}>
                {n.label}
              </a>
            ))}
          </nav>
        </header>
        <main id="main">
          <h1>{title}</h1>
          {children}
        </main>
        {scripts.map((s) => (
          <script src={`/dashboard/assets/${s}`} defer />
        ))}
      </body>
    </html>
  );
}

/** A labelled number. */
export function Stat({ label, value, id }: { label: string; value: string | number; id?: string }) {
  return (
    <div class="stat">
      <span class="stat-value" id={id}>
        {value}
      </span>
      <span class="stat-label">{label}</span>
    </div>
  );
}

/** Numbers as people read them: integers grouped, fractions to 3 places, null as a dash. */
export function fmt(value: number | null | undefined, digits = 3): string {
  if (value === null || value === undefined || Number.isNaN(value)) return '–';
  if (Number.isInteger(value)) return value.toLocaleString('en-US');
  return value.toFixed(digits);
}
