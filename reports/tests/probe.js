// Appended to a copy of a report by screenshot.sh: measures in the browser that the overview
// is at the top, one line per section, failures first, that every link resolves, and that
// following an overview link to a folded section opens it and scrolls it to the top. Writes
// key=value lines into a pre element, id probe, for --dump-dom.
addEventListener('load', () => {
  const out = [];
  const ov = document.getElementById('overview');
  out.push('overview_first=' + (ov !== null && document.querySelector('table') === ov));
  out.push('overview_top=' + (ov ? Math.round(ov.getBoundingClientRect().top) : -1));
  const rows = ov ? [...ov.querySelectorAll('tr')].slice(1) : [];
  const results = rows.map(r => r.cells[1] ? r.cells[1].className : '');
  const firstOk = results.indexOf('ok');
  out.push('rows=' + rows.length, 'sections=' + document.querySelectorAll('details').length);
  out.push('failures=' + results.filter(c => c === 'notok').length);
  out.push('failures_first=' + (firstOk >= 0 && results.slice(firstOk).every(c => c === 'ok')));
  const links = [...document.querySelectorAll('a[href^="#"]')];
  const target_of = a => document.getElementById(decodeURIComponent(a.getAttribute('href').slice(1)));
  out.push('links=' + links.length, 'unresolved=' + links.filter(a => !target_of(a)).length);
  const link = firstOk >= 0 ? rows[firstOk].querySelector('a[href^="#"]') : null;
  const target = link && target_of(link);
  const section = target && target.closest('details');
  out.push('target_was_open=' + (section ? section.open : 'none'));
  if (link) link.click();
  setTimeout(() => {
    out.push('target_open=' + (section ? section.open : 'none'));
    out.push('target_top=' + (target ? Math.round(target.getBoundingClientRect().top) : -1));
    out.push('scrolled=' + Math.round(scrollY));
    const pre = document.createElement('pre');
    pre.id = 'probe';
    pre.textContent = out.join('\n');
    document.body.appendChild(pre);
  }, 500);
});
