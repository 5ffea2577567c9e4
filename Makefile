# sly-agent-q: build, test, package, benchmark.
# `make test` installs what is missing (Debian packages, npm dependencies) and runs every suite.
# The SLY runs use SLY_DIR, or the pinned SLY beside the checkout (scripts/vendor-sly.sh).

BUNDLE := dist/sly-agent-q-server.js
EMACS  ?= emacs

.PHONY: all build deps generate check test test-server test-cl test-elisp test-e2e test-security test-tui test-gui screens gui-screens lint typecheck run package release bench clean

all: build

deps:
	@scripts/ensure-deps.sh

build: deps $(BUNDLE)

$(BUNDLE): $(shell find server -name '*.ts') package.json scripts/build.mjs scripts/bundle-loader.js
	node scripts/build.mjs

# Rewrite what is derived from the declarations: README's tool table, the protocol doc, Emacs's
# protocol table (test/server/generated.test.ts fails while any is stale).
generate: build
	node scripts/generate.mjs

typecheck: deps
	npx tsc --noEmit -p .

# The loop after each change (a few minutes): server, Elisp, CL on SBCL, one end-to-end scenario.
check: build
	@scripts/check.sh

test: build
	@scripts/test-all.sh

test-server: build
	scripts/test-server.sh

test-cl: deps
	@bash -c '. scripts/vendor-sly.sh; exec test/cl/run.sh'

test-elisp: build
	@bash -c '. scripts/vendor-sly.sh; exec test/elisp/run.sh'

test-e2e: build
	@bash -c '. scripts/vendor-sly.sh; exec test/e2e/run.sh'

# The trust boundary, attacked: vitest against the server, ERT with the real server and image.
test-security: build
	@bash -c '. scripts/vendor-sly.sh; exec test/security/run.sh'

# The chat on a real terminal: make run under tmux, the screen captured and asserted (test/tui).
test-tui: build
	@bash -c '. scripts/vendor-sly.sh; exec test/tui/run.sh'

# The chat in a GUI frame (Emacs with X on Xvfb), light and dark: its faces and its pixels checked (test/gui).
test-gui: build
	@test/gui/run.sh

# The README's pictures of the chat in a GUI frame (doc/screenshots/), taken by the GUI suite.
gui-screens: build
	@SAQ_GUI_SCREENSHOTS=doc/screenshots test/gui/run.sh

# The README's text captures of the chat, rewritten from the screens the terminal suite keeps.
screens: build
	@bash -c '. scripts/vendor-sly.sh; dir="$$(mktemp -d)"; SAQ_TUI_SNAPSHOTS="$$dir" test/tui/run.sh; \
	  node scripts/readme-screens.mjs "$$dir"; status=$$?; rm -rf "$$dir"; exit $$status'

clean:
	rm -rf dist
	find lisp-elisp test -name '*.elc' -delete

# The package archive (dist/sly-agent-q-VERSION.tar) from the MELPA-style recipe.
package: build
	$(EMACS) -Q --batch -l scripts/make-package.el -f sly-agent-q-make-package

# Check that the versions agree, build the npm tarball and the Elisp package, lint, dry-run the publish.
release: build
	scripts/release.sh

# Set up and start the product: Emacs in the terminal, SBCL under SLIME, the chat open.
run:
	@scripts/run.sh

# What the agent costs beyond the model's own time: one table of medians, spreads and ratios (bench/).
bench: build
	bench/run.sh
