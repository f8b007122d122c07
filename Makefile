# agentctl: `make demo` and `make test` set themselves up (a virtual
# environment in .venv with the package and its test dependencies).

PYTHON  ?= python3
VENV    ?= .venv
PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
LIBDIR  ?= $(PREFIX)/lib/agentctl
MANDIR  ?= $(PREFIX)/share/man
DATADIR ?= $(PREFIX)/share
DESTDIR ?=
JOBS    ?= 4         # pytest's workers: its tests mostly wait (on 2 cores, 2 left them idle half the time)
EXTRAS  ?=

# The programs: the table's (agentctl/programs.py, which imports nothing: any Python reads it)
PROGRAMS = $(shell $(PYTHON) -c 'from agentctl.programs import NAMES; print(*("agent-" + n for n in NAMES))')
STAMP    = $(VENV)/.stamp

.PHONY: all venv demo pictures test soak test-live bench programs install uninstall clean

all: venv

$(STAMP): pyproject.toml
	@# the man page tests render with a real roff formatter
	command -v groff >/dev/null || command -v mandoc >/dev/null || \
		{ apt-get update -qq && apt-get install -y -qq groff-base; } || \
		echo "make: install groff (or mandoc) for the man page tests" >&2
	@# every tool call runs in a bubblewrap sandbox (agent-run(1), The sandbox)
	command -v bwrap >/dev/null || \
		{ apt-get update -qq && apt-get install -y -qq bubblewrap; } || \
		echo "make: install bubblewrap (bwrap): without it no tool call runs" >&2
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,mcp,postgres]'
	touch $(STAMP)

venv: $(STAMP)

# The demo runs on a database of its own, made afresh each time: never the
# user's default one.
demo: $(STAMP)
	rm -rf .demo && mkdir .demo
	@echo "make demo: on the database $(CURDIR)/.demo/agents.db"
	AGENTCTL_DB="$(CURDIR)/.demo/agents.db" XDG_DATA_HOME="$(CURDIR)/.demo/data" \
	XDG_CACHE_HOME="$(CURDIR)/.demo/cache" PATH="$(CURDIR)/bin:$$PATH" sh examples/demo.sh

# README.md's picture of agent-top and docs/tree.svg (agent-ps --format dot, drawn by
# Graphviz's dot), made again by the real programs on a small tree (docs/pictures.py).
pictures: $(STAMP)
	$(VENV)/bin/python docs/pictures.py

# Twice: on SQLite files, then the tests of storage semantics (every program end to
# end: mail, the event log, runs and leases, requests, lifecycle, timers, budgets,
# endpoints, concurrent writers) on PostgreSQL, a server per worker started by the
# fixture (tests/pgserver.py). The tests of parsing, rendering, the models' wire and
# faults, tools and their sandbox and network, compaction's text, the docs' examples,
# the telemetry's wire, agent-top's screens and the SQLite file itself run once: their
# SQL is the same on both; so do the tests marked sqlite_files, whose databases are
# SQLite files of their own whatever the backend (the kill -9 ones, replay's property).
# Without the PostgreSQL server binaries the second pass says so loudly and skips.
PG_SKIP = tests/test_jsonin.py tests/test_table.py tests/test_completions.py tests/test_man.py \
	tests/test_layers.py tests/test_install.py tests/test_models_schema.py \
	tests/test_models_wire.py tests/test_damage.py tests/test_fuzz.py tests/test_postgresql.py \
	tests/test_terminal.py tests/live tests/test_mcp.py tests/test_sandbox.py \
	tests/test_sandbox_attacks.py tests/test_seccomp.py tests/test_proxy.py \
	tests/test_cli.py tests/test_examples.py tests/test_external_tools.py \
	tests/test_compaction.py tests/test_compaction_replay.py tests/test_voice.py \
	tests/test_prefix.py tests/test_tool_pairing.py tests/test_streamjson.py \
	tests/test_hostile_model.py tests/test_hostile_input.py tests/test_models_faults.py \
	tests/test_models_openai.py tests/test_models_anthropic.py tests/test_models_offline.py \
	tests/test_models_limits.py tests/test_net.py tests/test_net_outlet.py \
	tests/test_sandbox_procs.py tests/test_shape.py \
	tests/test_otlp.py tests/test_telemetry.py tests/test_tracing.py tests/test_top_views.py \
	tests/test_registries.py tests/test_mcp_launchers.py tests/test_netwatch.py \
	tests/test_mcp_failures.py tests/test_mcp_wire.py tests/test_mcp_elicit.py \
	tests/test_mcp_tasks.py \
	tests/test_models_transport.py \
	tests/test_models_tls.py \
	tests/test_batch_crash.py tests/test_fakebatch.py tests/test_text.py
test: $(STAMP)
	@# the official MCP reference servers and their tarballs, from npm once per machine
	@# (tests/npm/), and the MCP SDK's wheels, from the Python package index once per
	@# machine (tests/wheels/): tests/registries.py serves both on 127.0.0.1
	PYTHON=$(VENV)/bin/python sh tests/npm/install.sh
	$(VENV)/bin/python tests/wheels/install.py
	$(VENV)/bin/python -m pytest -n $(JOBS) tests
	$(VENV)/bin/python -m pytest -n $(JOBS) --backend postgresql \
		$(foreach f,$(PG_SKIP),--ignore=$(f)) tests

# The full-size robustness runs (the suite runs smaller ones): 16 writers x
# 1,000 operations beside two agent-run --all loops, 8 senders x 200 mails,
# 1,500 fuzz cases per program, and every crash point; each prints its figures.
soak: $(STAMP)
	rm -f .fuzz-cases
	AGENTCTL_SOAK_OPS=1000 AGENTCTL_SOAK_MAILS=200 AGENTCTL_FUZZ_EXAMPLES=1500 \
		AGENTCTL_SOAK_KILLS=60 AGENTCTL_FUZZ_COUNT=$(CURDIR)/.fuzz-cases \
		$(VENV)/bin/python -m pytest -s -p no:cacheprovider \
		tests/test_soak.py tests/test_fuzz.py tests/test_crash.py tests/test_crash_long_lived.py \
		tests/test_mail.py::test_eight_processes_sending_at_once_lose_nothing \
		tests/test_postgresql.py::test_four_hosts_killed_at_random_run_every_turn_once_and_lose_nothing; \
	status=$$?; awk '{n += $$1} END {print "fuzz cases run: " n + 0}' .fuzz-cases; \
	rm -f .fuzz-cases; exit $$status

test-live: $(STAMP)
	PATH="$(CURDIR)/bin:$$PATH" sh tests/live/run.sh

bench: $(STAMP)
	$(VENV)/bin/python bench/bench.py
	$(VENV)/bin/python bench/ps.py
	$(VENV)/bin/python bench/compaction.py
	$(VENV)/bin/python bench/events.py
	$(VENV)/bin/python bench/tools.py
	$(VENV)/bin/python bench/workspace.py
	$(VENV)/bin/python bench/mcp.py
	$(VENV)/bin/python bench/postgres.py
	$(VENV)/bin/python bench/cache.py
	$(VENV)/bin/python bench/top.py
	$(VENV)/bin/python bench/limits.py
	$(VENV)/bin/python bench/otel.py
	$(VENV)/bin/python bench/net.py

# A private library directory with the dependencies, launchers in BINDIR,
# man pages and completions in their conventional places.
# EXTRAS=mcp,postgres also installs those optional extras (MCP servers, PostgreSQL;
# otel, which OpenTelemetry no longer needs, installs nothing).
programs:
	@test -n "$(PROGRAMS)" || { echo "make: $(PYTHON) can't read the programs (agentctl/programs.py)" >&2; exit 1; }

install: programs
	rm -rf build agentctl.egg-info	# (setuptools would take a stale copy of a package, or of its file list, from them)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --no-compile \
		--target "$(DESTDIR)$(LIBDIR)" ".$(if $(EXTRAS),[$(EXTRAS)])"
	mkdir -p "$(DESTDIR)$(BINDIR)"
	for p in $(PROGRAMS); do \
		m=$${p#agent-}; \
		printf '#!/usr/bin/env python3\nimport sys\nsys.path.insert(0, "%s")\nfrom agentctl.cli.%s import main\nsys.exit(main())\n' \
			"$(LIBDIR)" "$$m" > "$(DESTDIR)$(BINDIR)/$$p"; \
		chmod 755 "$(DESTDIR)$(BINDIR)/$$p"; \
	done
	for s in 1 5 7; do \
		ls man/*.$$s >/dev/null 2>&1 || continue; \
		mkdir -p "$(DESTDIR)$(MANDIR)/man$$s"; \
		install -m 644 man/*.$$s "$(DESTDIR)$(MANDIR)/man$$s/"; \
	done
	if [ -d completions/bash ]; then \
		mkdir -p "$(DESTDIR)$(DATADIR)/bash-completion/completions" \
			"$(DESTDIR)$(DATADIR)/zsh/site-functions" \
			"$(DESTDIR)$(DATADIR)/fish/vendor_completions.d"; \
		install -m 644 completions/bash/* "$(DESTDIR)$(DATADIR)/bash-completion/completions/"; \
		install -m 644 completions/zsh/* "$(DESTDIR)$(DATADIR)/zsh/site-functions/"; \
		install -m 644 completions/fish/* "$(DESTDIR)$(DATADIR)/fish/vendor_completions.d/"; \
	fi
	@# what each shell needs to load them (agentctl(7), FILES; README, Install)
	@printf '%s\n' \
		"make: completions: for bash, the bash-completion package sourced by ~/.bashrc loads them" \
		"  when $(DATADIR) is ~/.local/share or in \$$XDG_DATA_DIRS (/usr/local/share:/usr/share" \
		"  by default); else, or without the package, add to ~/.bashrc:" \
		"    for f in $(DATADIR)/bash-completion/completions/agent-*; do . \"\$$f\"; done" \
		"  for zsh, unless \$$fpath holds $(DATADIR)/zsh/site-functions, add to ~/.zshrc before compinit:" \
		"    fpath=($(DATADIR)/zsh/site-functions \$$fpath)" \
		"  for fish, unless \$$XDG_DATA_DIRS holds $(DATADIR), add to ~/.config/fish/config.fish:" \
		"    set -p fish_complete_path $(DATADIR)/fish/vendor_completions.d"

uninstall: programs
	for p in $(PROGRAMS); do \
		rm -f "$(DESTDIR)$(BINDIR)/$$p" \
			"$(DESTDIR)$(DATADIR)/bash-completion/completions/$$p" \
			"$(DESTDIR)$(DATADIR)/zsh/site-functions/_$$p" \
			"$(DESTDIR)$(DATADIR)/fish/vendor_completions.d/$$p.fish" \
			"$(DESTDIR)$(MANDIR)/man1/$$p.1"; \
	done
	rm -f "$(DESTDIR)$(MANDIR)/man5/agentctl.5" "$(DESTDIR)$(MANDIR)/man7/agentctl.7"
	rm -rf "$(DESTDIR)$(LIBDIR)"

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .fuzz-cases .demo
