"""Check the built course website in a real browser: `python tools/check_site.py [_site]` (exit 1 on any problem).

1. Links: every internal href/src of every HTML page resolves to a file in the site, and a link's #anchor to an
   id on the page it points at (no 404 inside the site).
2. Browser: serves the site on 127.0.0.1 and opens the home page, every lesson (and exercise, teaching guide, API
   page) in headless Chromium (Debian's /usr/bin/chromium, driven by Playwright; no browser is downloaded). A page
   fails on an uncaught JavaScript error, a console error, a failed or non-local request, an image that did not
   load, fewer figures than the notebook's saved image outputs, math that MathJax did not render, or an empty
   page. The search page must find a lesson. One full-page screenshot per page is kept in _site/_screens/.
"""
import functools
import html.parser
import json
import re
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
# flags that work on these machines (no network beyond the registries, root, no GPU); Playwright adds a fresh
# --user-data-dir of its own
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LESSON_RE = re.compile(r"^\d+[a-z]?_.+\.ipynb$")
MIN_TEXT = 50  # characters of text beyond the title and the Colab/GitHub links below which a page counts as empty


class _Refs(html.parser.HTMLParser):
    "Collects the ids and the href/src references of one HTML page"
    def __init__(self):
        super().__init__()
        self.ids, self.refs = set(), []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        for key in ("href", "src"):
            if a.get(key) and not (tag == "link" and a.get("rel") in ("preconnect", "dns-prefetch")):
                self.refs.append((tag, a[key]))
        for part in (a.get("srcset") or "").split(","):
            if part.strip():
                self.refs.append((tag, part.split()[0]))


def check_links(site: Path) -> list[str]:
    "Every internal reference of every page resolves to a file (and its #anchor to an id there)"
    pages = {p: _parse(p) for p in site.rglob("*.html") if not {"_static", "_screens"} & set(p.parts)}
    errors, n = [], 0
    for page, parsed in pages.items():
        for tag, ref in parsed.refs:
            u = urlsplit(ref)
            if u.scheme or u.netloc or ref.startswith(("mailto:", "javascript:", "data:")):
                continue  # external: not ours to resolve offline
            n += 1
            target = page if not u.path else (page.parent / unquote(u.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            where = f"{page.relative_to(site)}: <{tag}> {ref}"
            if not target.is_file() or site.resolve() not in target.resolve().parents:
                errors.append(f"broken link {where}")
            elif u.fragment and tag == "a" and target.suffix == ".html":
                ids = pages.get(target, None)
                ids = (ids or _parse(target)).ids
                if unquote(u.fragment) not in ids:
                    errors.append(f"missing anchor {where}")
    print(f"links: {n} internal references in {len(pages)} pages, {len(errors)} broken")
    return errors


@functools.cache
def _parse(path: Path) -> _Refs:
    p = _Refs()
    p.feed(path.read_text(errors="replace"))
    return p


def pages_to_open(site: Path) -> list[tuple[str, int | None]]:
    "(page, expected figures) for the home page, every lesson, exercise, the teaching guide and the API page"
    src = ROOT / "build" / "site" / "src"  # the staged notebooks (tools/site.sh): what the pages were built from

    def figures(staged: Path) -> int | None:
        if not staged.exists():
            return None
        nb = json.loads(staged.read_text())
        return sum(any(k.startswith("image/") for k in o.get("data", {}))
                   for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", []))

    out = [("index.html", figures(src / "index.ipynb"))]
    for p in sorted((ROOT / "nbs").glob("*.ipynb")):
        if LESSON_RE.match(p.name):
            out.append((f"{p.stem}.html", figures(src / p.name)))
    for p in sorted((ROOT / "exercises").glob("*.ipynb")):
        out.append((f"exercises/{p.stem}.html", figures(src / "exercises" / p.name)))
    if (ROOT / "docs" / "teaching.md").exists():
        out.append(("teaching.html", None))
    out.append(("api.html", None))
    return out


def exported_names() -> list[str]:
    "Every name in the `__all__` of nanot5_edu's modules (read from the source, not imported)"
    import ast
    names = []
    for f in sorted((ROOT / "nanot5_edu").glob("*.py")):
        if f.stem.startswith("_"):
            continue
        for node in ast.parse(f.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
                names += [f"{f.stem}.{n}" for n in ast.literal_eval(node.value)]
    return names


def serve(site: Path) -> tuple[ThreadingHTTPServer, str]:
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/"


PAGE_STATE_JS = """async () => {
  const imgs = [...document.querySelectorAll('article img, main img')];
  await Promise.all(imgs.map(i => { i.loading = 'eager';
      return i.complete ? null : new Promise(r => { i.onload = i.onerror = r; setTimeout(r, 10000); }); }));
  const art = document.querySelector('article') || document.querySelector('main') || document.body;
  const h1 = art.querySelector('h1');
  const math = document.querySelectorAll('.math').length;
  if (math && window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  return {
    title: h1 ? h1.textContent.replace(/#$/, '').trim() : '',
    text: art.innerText.trim().length - (h1 ? h1.innerText.length : 0)
          - [...art.querySelectorAll('.nb-links')].reduce((n, e) => n + e.innerText.length, 0),
    broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src')),
    figures: document.querySelectorAll('article .cell_output img').length,
    math, rendered: document.querySelectorAll('mjx-container').length,
    mathErrors: document.querySelectorAll('mjx-merror, .MathJax_Error').length,
    signatures: document.querySelectorAll('dl.py > dt.sig').length,
    rawRst: (art.innerText.match(/^\.\. [a-z:-]+::/m) || [''])[0],
    copyButtons: document.querySelectorAll('button.copybtn').length,
    codeCells: document.querySelectorAll('article .cell_input').length,
    prevNext: document.querySelectorAll('.prev-next-area a').length,
    sidebar: document.querySelectorAll('.bd-sidebar-primary a.reference').length,
  };
}"""


def check_browser(site: Path) -> list[str]:
    from playwright.sync_api import sync_playwright
    screens = site / "_screens"
    screens.mkdir(exist_ok=True)
    httpd, base = serve(site)
    errors = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            ctx = browser.new_context(viewport={"width": 1280, "height": 900})
            # nothing leaves the machine: a page that needs a CDN or any other host fails the check
            ctx.route(re.compile(r"^(?!http://127\.0\.0\.1:\d+/).*"), lambda route: route.abort())
            for path, expected in pages_to_open(site):
                errors += check_page(ctx, base, path, expected, screens)
            errors += check_search(ctx, base)
            browser.close()
    finally:
        httpd.shutdown()
    return errors


def check_page(ctx, base: str, path: str, expected: int | None, screens: Path) -> list[str]:
    page, problems = ctx.new_page(), []
    page.on("pageerror", lambda e: problems.append(f"JavaScript error: {e}"))
    page.on("console", lambda m: m.type == "error" and problems.append(f"console error: {m.text}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} ({r.failure})"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"))
    t0 = time.time()
    resp = page.goto(base + path, wait_until="load")
    if resp is None or resp.status != 200:
        problems.append(f"HTTP {resp.status if resp else 'no response'}")
    page.wait_for_load_state("networkidle")
    s = page.evaluate(PAGE_STATE_JS)
    if s["text"] < MIN_TEXT or not s["title"].strip():
        problems.append(f"empty page: {s['text']} characters, title {s['title']!r}")
    if s["rawRst"]:
        problems.append(f"unrendered reStructuredText on the page: {s['rawRst']!r}")
    if path == "api.html" and s["signatures"] < (n := len(exported_names())):
        problems.append(f"the API page shows {s['signatures']} signatures for {n} exported names")
    if s["broken"]:
        problems.append(f"{len(s['broken'])} image(s) did not load: {s['broken'][:5]}")
    if expected is not None and s["figures"] < expected:
        problems.append(f"{s['figures']} figures shown, the notebook has {expected} saved image outputs")
    if s["math"] and (s["rendered"] < s["math"] or s["mathErrors"]):
        problems.append(f"math not rendered: {s['rendered']} of {s['math']} formulas, {s['mathErrors']} errors")
    if s["codeCells"] and s["copyButtons"] < s["codeCells"]:
        problems.append(f"{s['copyButtons']} copy buttons for {s['codeCells']} code cells")
    if not s["sidebar"]:
        problems.append("no sidebar navigation")
    shot = screens / (path.replace("/", "__").removesuffix(".html") + ".png")
    page.screenshot(path=str(shot), full_page=True)
    page.close()
    status = "FAIL" if problems else "ok"
    print(f"{status:4} {path}: {s['title']!r}, {s['figures']} figures"
          f"{'' if expected is None else f' (notebook: {expected})'}, {s['rendered']}/{s['math']} math, "
          f"{s['copyButtons']} copy buttons, {s['prevNext']} prev/next, "
          f"{str(s['signatures']) + ' signatures, ' if s['signatures'] else ''}{s['text']} chars, "
          f"{time.time() - t0:.1f} s -> {shot.relative_to(screens.parent)}")
    return [f"{path}: {p}" for p in problems]


def check_search(ctx, base: str) -> list[str]:
    "The search page (Sphinx's own index, in the browser) finds the span-corruption lesson"
    page, problems = ctx.new_page(), []
    page.on("pageerror", lambda e: problems.append(f"JavaScript error: {e}"))
    page.goto(base + "search.html?q=sentinel", wait_until="load")
    try:
        page.wait_for_selector("#search-results li", timeout=15000)
        hits = page.locator("#search-results li").count()
    except Exception:
        hits = 0
    if not hits:
        problems.append("search for 'sentinel' found nothing")
    print(f"{'FAIL' if problems else 'ok':4} search.html?q=sentinel: {hits} results")
    page.close()
    return [f"search: {p}" for p in problems]


def main(site: Path) -> int:
    if not (site / "index.html").is_file():
        print(f"no {site}/index.html: build the site first (bash tools/site.sh)")
        return 1
    t0 = time.time()
    errors = check_links(site)
    errors += check_browser(site)
    for e in errors:
        print(f"::error:: {e}")
    print(f"site check: {'FAILED, ' + str(len(errors)) + ' problem(s)' if errors else 'all pages OK'} "
          f"in {time.time() - t0:.0f} s; screenshots in {site}/_screens/")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "_site")))
