// Stepwise dashboard: what must be live on top of the server-rendered pages.
// Overview: polls the stats the section names every 2 s, updates its numbers and the rate charts.
(() => {
  const section = document.querySelector('[data-live-stats]');
  if (!section) return;
  const url = section.getAttribute('data-live-stats');
  const fields = {
    's-steps': (s) => s.produced.steps,
    's-trajectories': (s) => s.produced.trajectories,
    's-queue': (s) => s.queueDepth,
    's-leases': (s) => s.activeLeases,
    's-served': (s) => s.leased.groups,
    's-consumed': (s) => s.consumed.groups,
    's-awaiting': (s) => s.awaitingSignals,
    's-version': (s) => s.policyVersion,
  };
  const keep = 150; // 5 minutes at one sample every 2 s
  const series = { steps: [[], []], groups: [[], []] };
  const charts = {};
  for (const el of document.querySelectorAll('.chart[data-series]')) {
    const name = el.getAttribute('data-series');
    charts[name] = new uPlot(
      {
        width: Math.max(300, el.clientWidth || 480),
        height: 180,
        series: [{}, { label: name === 'steps' ? 'steps/s' : 'groups/s', stroke: '#3d7cc9', width: 2 }],
        axes: [{}, { size: 60 }],
      },
      series[name],
      el,
    );
  }
  let last = null;
  const tick = async () => {
    try {
      const res = await fetch(url, { headers: { accept: 'application/json' } });
      if (!res.ok) return;
      const s = await res.json();
      for (const [id, get] of Object.entries(fields)) {
        const el = document.getElementById(id);
        if (el) el.textContent = Number(get(s)).toLocaleString('en-US');
      }
      const now = Date.now() / 1000;
      if (last) {
        const dt = Math.max(0.001, now - last.t);
        const add = (name, value) => {
          const [xs, ys] = series[name];
          xs.push(now);
          ys.push(Math.max(0, value) / dt);
          if (xs.length > keep) {
            xs.shift();
            ys.shift();
          }
          charts[name]?.setData(series[name]);
        };
        add('steps', s.produced.steps - last.steps);
        add('groups', s.leased.groups - last.groups);
      }
      last = { t: now, steps: s.produced.steps, groups: s.leased.groups };
      section.setAttribute('data-updated', String(Date.now()));
    } catch {
      // The next tick tries again.
    }
  };
  tick();
  setInterval(tick, 2000);
})();
