// Stepwise dashboard, trajectory pages: small conveniences over server-rendered HTML that works
// without them.
(() => {
  // The list: one checkbox chooses every row of the page (shown only when this script runs).
  const all = document.getElementById('pick-all');
  if (all) {
    const rows = () => Array.from(document.querySelectorAll('input[type="checkbox"][name="id"]'));
    all.hidden = false;
    all.addEventListener('change', () => {
      for (const box of rows()) box.checked = all.checked;
    });
    document.addEventListener('change', (event) => {
      if (event.target === all || event.target?.name !== 'id') return;
      const boxes = rows();
      const chosen = boxes.filter((b) => b.checked).length;
      all.checked = chosen === boxes.length;
      all.indeterminate = chosen > 0 && chosen < boxes.length;
    });
  }
  // A trajectory: a link to a step (#step-3) opens that step's collapsed details.
  const openTarget = () => {
    const id = decodeURIComponent(location.hash.slice(1));
    const target = id ? document.getElementById(id) : null;
    if (target instanceof HTMLDetailsElement && !target.open) {
      target.open = true;
      target.scrollIntoView();
    }
  };
  window.addEventListener('hashchange', openTarget);
  openTarget();
})();
