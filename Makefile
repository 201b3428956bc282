# The two commands of the README. Everything else is set up on demand.
.PHONY: dev test deps build

NODE_MODULES_STAMP := node_modules/.package-lock.json

deps: $(NODE_MODULES_STAMP)

$(NODE_MODULES_STAMP): package.json package-lock.json
	@bash infra/scripts/check-prereqs.sh
	npm ci --no-audit --no-fund

## Run the control plane locally on its embedded defaults.
dev: deps
	npx tsx cli/entry.ts dev

## Lint, type-check and run every test (unit, workflow, integration, end to end).
test: deps
	bash infra/scripts/test.sh

build: deps
	npm run build
