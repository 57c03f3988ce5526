/*
 * The reward curve of `stepwise train` as one self-contained HTML page (an inline SVG, no scripts),
 * so it opens anywhere without Python plotting packages.
 */

export interface CurveSeries {
  label: string;
  /** x: policy version, y: mean reward of the rollouts that version generated. */
  points: readonly { x: number; y: number }[];
  color: string;
}

const escapeHtml = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

export function rewardCurveHtml(
  title: string,
  series: readonly CurveSeries[],
  notes: readonly string[],
): string {
  const width = 720;
  const height = 360;
  const m = { left: 56, right: 24, top: 24, bottom: 48 };
  const xs = series.flatMap((s) => s.points.map((p) => p.x));
  const xMin = xs.length ? Math.min(...xs) : 0;
  const xMax = xs.length ? Math.max(...xs, xMin + 1) : 1;
  const px = (x: number) => m.left + ((x - xMin) / (xMax - xMin)) * (width - m.left - m.right);
  const py = (y: number) => m.top + (1 - y) * (height - m.top - m.bottom);
  const grid: string[] = [];
  for (const y of [0, 0.2, 0.4, 0.6, 0.8, 1]) {
    grid.push(
      `<line x1="${m.left}" x2="${width - m.right}" y1="${py(y)}" y2="${py(y)}" stroke="#ddd"/>`,
      `<text x="${m.left - 8}" y="${py(y) + 4}" text-anchor="end">${y.toFixed(1)}</text>`,
    );
  }
  const step = Math.max(1, Math.ceil((xMax - xMin) / 10));
  for (let x = xMin; x <= xMax; x += step)
    grid.push(`<text x="${px(x)}" y="${height - m.bottom + 18}" text-anchor="middle">${x}</text>`);
  const lines = series.map((s) => {
    const path = s.points.map((p) => `${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`).join(' ');
    const dots = s.points
      .map(
        (p) =>
          `<circle cx="${px(p.x).toFixed(1)}" cy="${py(p.y).toFixed(1)}" r="3" fill="${s.color}"><title>version ${p.x}: ${p.y.toFixed(3)}</title></circle>`,
      )
      .join('');
    return `<polyline fill="none" stroke="${s.color}" stroke-width="2" points="${path}"/>${dots}`;
  });
  const legend = series
    .map(
      (s, i) =>
        `<rect x="${m.left + 8}" y="${m.top + 6 + i * 18}" width="12" height="4" fill="${s.color}"/>` +
        `<text x="${m.left + 26}" y="${m.top + 12 + i * 18}">${escapeHtml(s.label)}</text>`,
    )
    .join('');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(title)}</title>
<style>body{font:14px system-ui,sans-serif;margin:24px;color:#222}svg text{font-size:12px;fill:#444}</style>
</head><body>
<h1 style="font-size:18px">${escapeHtml(title)}</h1>
<svg width="${width}" height="${height}" role="img" aria-label="mean reward by policy version">
${grid.join('\n')}
<text x="${(m.left + width - m.right) / 2}" y="${height - 8}" text-anchor="middle">policy version</text>
<text transform="translate(14 ${(m.top + height - m.bottom) / 2}) rotate(-90)" text-anchor="middle">mean reward</text>
${lines.join('\n')}
${legend}
</svg>
${notes.map((n) => `<p>${escapeHtml(n)}</p>`).join('\n')}
</body></html>
`;
}
