#!/usr/bin/env bash
# Vendor the book's browser-side libraries from the npm registry into _vendor/ (copied to
# the HTML's _static/): the ipywidgets HTML manager with RequireJS (_vendor/widgets/) and
# MathJax 3 (_vendor/mathjax/), so widgets and formulas render without a CDN, for offline
# readers and the browser test. Optional: without npm the book uses the CDN copies
# (see mlinfra_book.py).
set -euo pipefail
HTML_MANAGER=${HTML_MANAGER:-@jupyter-widgets/html-manager@1.0.15}
REQUIREJS=${REQUIREJS:-requirejs@2.3.8}
MATHJAX=${MATHJAX:-mathjax@3.2.2}
dest=_vendor/widgets
mathjax=_vendor/mathjax
if ! command -v npm >/dev/null 2>&1; then
  echo "vendor-libs: npm not found; widgets will load from the CDN" >&2
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$HTML_MANAGER" "$REQUIREJS" "$MATHJAX" >/dev/null)
mkdir -p "$tmp/hm" "$tmp/rq" "$tmp/mj" "$dest/html-manager" "$mathjax"
tar xzf "$tmp"/jupyter-widgets-html-manager-*.tgz -C "$tmp/hm"
tar xzf "$tmp"/requirejs-*.tgz -C "$tmp/rq"
tar xzf "$tmp"/mathjax-*.tgz -C "$tmp/mj"
# embed-amd.js and the fonts it loads; not the non-AMD bundle or source maps.
find "$tmp/hm/package/dist" -maxdepth 1 -type f ! -name 'embed.js' ! -name '*.map' \
  -exec cp {} "$dest/html-manager/" \;
cp "$tmp/rq/package/require.js" "$dest/require.js"
# MathJax: the combined TeX+MathML/CHTML bundle and the components it loads on demand.
cp "$tmp/mj/package/es5/tex-mml-chtml.js" "$mathjax/"
cp -r "$tmp/mj/package/es5/"{input,output,ui,a11y,adaptors,sre} "$mathjax/"
echo "vendor-libs: $(du -sh _vendor | cut -f1) in _vendor ($HTML_MANAGER, $REQUIREJS, $MATHJAX)"
