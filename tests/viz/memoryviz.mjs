// Open memory snapshots in PyTorch's own viewer (MemoryViz.js) in headless Chromium and click
// every event of every view, as a user would, recording every error the page throws and every
// block drawn outside its segment.
//
//   node memoryviz.mjs PLAN.json RESULT.json
//
// PLAN: {"viewer": MemoryViz.js, "d3": d3.js (d3 5, the version the viewer imports), "chromium":
//        the browser, "playwright": playwright-core's directory, "snapshots": [{"path", "expected":
//        {"<device>": [addresses of the active blocks]}}]}
// RESULT: {"runs": [{"snapshot", "view", "device", "events", "clicked", "errors": [...],
//          "misplaced": [...], "drawn_at_end": [...]}], "refused": [URLs the page asked for]}
//
// The viewer imports d3 from a CDN; nothing leaves this machine: the page gets d3 from the local
// file and every other request is refused. The viewer's own code runs unchanged, except that its
// import lines read d3 from the page (where the local d3.js put it).
import {readFileSync, writeFileSync, mkdtempSync, rmSync} from 'node:fs';
import {tmpdir} from 'node:os';
import {join} from 'node:path';
import {createRequire} from 'node:module';

const [planPath, resultPath] = process.argv.slice(2);
const plan = JSON.parse(readFileSync(planPath, 'utf8'));
const require = createRequire(import.meta.url);
const {chromium} = require(plan.playwright);

const VIEWS = ['Active Memory Timeline', 'Allocator State History', 'Active Cached Segment Timeline'];
const ORIGIN = 'http://memoryviz.test';

// The viewer's ES module imports ("import * as d3 from 'https://...'", "import {zoom} from ...")
// become reads of the page's d3.
function localImports(src) {
  let n = 0;
  const out = src.replace(/^import\s+(\*\s+as\s+\w+|\{[^}]*\})\s+from\s+["'][^"']+["'];?/gm, (_m, what) => {
    n++;
    return what.startsWith('*') ? `const ${what.split(/\s+/).pop()} = window.d3;` : `const ${what} = window.d3;`;
  });
  if (n === 0) throw new Error('no import lines found in the viewer: not the MemoryViz.js this test knows');
  return out;
}

const viewer = localImports(readFileSync(plan.viewer, 'utf8'));
const d3src = readFileSync(plan.d3, 'utf8');
const page_html = `<!DOCTYPE html><html><head><meta charset="utf-8"><script src="${ORIGIN}/d3.js"></script></head>
<body><script type="module">
import {add_local_files} from "${ORIGIN}/MemoryViz.js";
window.__viz = {add_local_files};
</script></body></html>`;

const refused = [];
const userDataDir = mkdtempSync(join(tmpdir(), 'tessera-memoryviz-'));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: plan.chromium,
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
await context.route('**/*', route => {
  const url = route.request().url();
  const body = {
    [`${ORIGIN}/index.html`]: [page_html, 'text/html'],
    [`${ORIGIN}/d3.js`]: [d3src, 'text/javascript'],
    [`${ORIGIN}/MemoryViz.js`]: [viewer, 'text/javascript'],
  }[url];
  if (body) return route.fulfill({status: 200, contentType: body[1], body: body[0]});
  refused.push(url);
  return route.abort();
});

// In the page: click every event of the view on show, check the blocks drawn after each click.
async function clickAll(page, view, expected) {
  return page.evaluate(({view, expected}) => {
    const errors = [];
    const misplaced = [];
    const onerror = e => errors.push(String(e.message || e.error));
    window.addEventListener('error', onerror);
    const shown = [...document.body.children].filter(
      d => d.tagName === 'DIV' && d.style.display !== 'none' && d.querySelector('svg'));
    const root = shown[shown.length - 1];
    // as the browser fires them for a real pointer (d3's zoom and brush read the event's view)
    const fire = (el, type) => {
      const box = el.getBoundingClientRect();
      el.dispatchEvent(new MouseEvent(type, {bubbles: true, cancelable: true, view: window,
        clientX: box.x + box.width / 2, clientY: box.y + box.height / 2}));
    };
    let events = 0;
    let clicked = 0;
    let drawn = [];
    // Blocks of the memory view: each inside the segment it was placed in.
    const checkBlocks = at => {
      const svg = root.querySelector('svg');
      const groups = svg ? svg.querySelectorAll(':scope > g > g') : [];
      const rects = groups.length > 1 ? [...groups[1].querySelectorAll('rect')] : [];
      drawn = [];
      for (const r of rects) {
        const b = r.__data__;
        if (!b) continue;
        drawn.push(b.addr);
        const s = b.segment;
        if (!s || b.addr < s.addr || b.addr + b.size > s.addr + s.size)
          misplaced.push(`event ${at}: block ${b.addr.toString(16)} (${b.size} bytes) outside its segment`);
      }
    };
    if (view === 'Allocator State History') {
      const list = root.querySelector(':scope > div > div'); // the event list of the grid
      const items = list ? [...list.children].filter(c => c.tagName === 'PRE') : [];
      events = items.length;
      items.forEach((el, i) => {
        const before = errors.length;
        fire(el, 'mousedown');
        fire(el, 'mouseup');
        clicked++;
        for (let k = before; k < errors.length; k++) errors[k] = `event ${i}: ${errors[k]}`;
        checkBlocks(i);
      });
      if (!items.length) checkBlocks(-1);
    } else {
      // the allocations of the plot (the minimap's polygon lies under its brush: not clickable)
      const plot = root.querySelector('svg');
      const polys = plot ? [...plot.querySelectorAll('polygon')] : [];
      events = polys.length;
      polys.forEach((el, i) => {
        const before = errors.length;
        fire(el, 'mouseover');
        fire(el, 'mousedown');
        fire(el, 'mouseup');
        fire(el, 'mouseleave');
        clicked++;
        for (let k = before; k < errors.length; k++) errors[k] = `element ${i}: ${errors[k]}`;
      });
    }
    window.removeEventListener('error', onerror);
    const missing = expected ? expected.filter(a => !drawn.includes(a)) : [];
    const extra = expected ? drawn.filter(a => !expected.includes(a)) : [];
    return {events, clicked, errors, misplaced, missing, extra};
  }, {view, expected});
}

const runs = [];
for (const snap of plan.snapshots) {
  const b64 = readFileSync(snap.path).toString('base64');
  for (const [device, expected] of Object.entries(snap.expected)) {
    for (const view of VIEWS) {
      const page = await context.newPage();
      const pageErrors = [];
      page.on('pageerror', e => pageErrors.push(e.message));
      page.on('console', m => { if (m.type() === 'error') pageErrors.push(m.text()); });
      await page.goto(`${ORIGIN}/index.html`);
      await page.waitForFunction(() => window.__viz !== undefined, null, {timeout: 30000});
      await page.evaluate(({b64, view, device}) => {
        window.__viz.add_local_files([{name: 'snapshot', base64: b64}], view);
        const gpu = document.querySelectorAll('body > select')[2];
        if (gpu && gpu.value !== String(device)) {
          gpu.value = String(device);
          gpu.dispatchEvent(new Event('change'));
        }
      }, {b64, view, device: Number(device)});
      // the history view selects its last event on the next frame
      await page.evaluate(() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r))));
      const r = await clickAll(page, view, view === 'Allocator State History' ? expected : null);
      await page.evaluate(() => new Promise(r => setTimeout(r, 0)));
      r.errors.push(...pageErrors.filter(e => !r.errors.includes(e)));
      runs.push({snapshot: snap.path, view, device: Number(device), ...r});
      await page.close();
    }
  }
}
await context.close();
rmSync(userDataDir, {recursive: true, force: true});
writeFileSync(resultPath, JSON.stringify({runs, refused}, null, 1));
