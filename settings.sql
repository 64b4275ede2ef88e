-- lmd settings: the schema and every built-in default, one commented line per setting.
-- Applied on every start with INSERT OR IGNORE, so values you changed survive upgrades.
-- Types and allowed values are declared by the plugin that owns each setting
-- (daemon/core_settings.py for the core); `lmd settings list` shows them all.

CREATE TABLE IF NOT EXISTS settings (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);



-- == core: the backend ==
-- Model id sent to the backend (gpt-3.5-turbo, the original default, is retired).
INSERT OR IGNORE INTO settings (name, value) VALUES ('openai_model', 'gpt-4.1-mini');
-- Base URL (http://host:port/v1) or full .../chat/completions URL of any OpenAI-compatible server.
INSERT OR IGNORE INTO settings (name, value) VALUES ('openai_chat_endpoint', 'https://api.openai.com/v1/chat/completions');
-- Seconds to wait for one backend call before giving up with a clear error.
INSERT OR IGNORE INTO settings (name, value) VALUES ('llm_timeout_secs', '60');
-- Retries of one backend call on connection errors, 429 and 5xx (with backoff).
INSERT OR IGNORE INTO settings (name, value) VALUES ('llm_max_retries', '2');



-- == core: sessions and modes ==
-- The operating system bash commands are written for.
INSERT OR IGNORE INTO settings (name, value) VALUES ('system', 'Ubuntu 22.04');
-- Mode that answers when no directive is given and the session is idle or new.
INSERT OR IGNORE INTO settings (name, value) VALUES ('default_prompt', 'dali');
-- After this many idle seconds a session falls back to default_prompt (and pending questions expire).
INSERT OR IGNORE INTO settings (name, value) VALUES ('end_session_after_idle_secs', '300');
-- Most model turns one request may take in a mode's thought loop.
INSERT OR IGNORE INTO settings (name, value) VALUES ('max_thought_loops', '6');
-- Extra spoken forms of directives, as JSON {"mode": ["alias", ...]} (speech engines mis-hear rare words).
INSERT OR IGNORE INTO settings (name, value) VALUES ('directive_aliases', '{"marat": ["murat", "marrat", "ma rat"], "dali": ["dolly", "dally"], "cobol": ["kobol", "co bol"]}');



-- == core: history and karma ==
-- Most tokens of history sent to the model in one call.
INSERT OR IGNORE INTO settings (name, value) VALUES ('max_tokens', '3500');
-- Characters of command output kept for the model and the reply; the rest is cut with a marker.
INSERT OR IGNORE INTO settings (name, value) VALUES ('max_bash_output_len_for_response', '2000');
-- How many of a session's newest prompts are considered for the context.
INSERT OR IGNORE INTO settings (name, value) VALUES ('recent_history_limit', '50');
-- Karma of an ordinary prompt.
INSERT OR IGNORE INTO settings (name, value) VALUES ('default_karma', '1000');
-- Karma of prompts the system considers crucial.
INSERT OR IGNORE INTO settings (name, value) VALUES ('instructive_karma', '10000');
-- Karma of operative (user-promoted) prompts and of a finished task's instruction and answer.
INSERT OR IGNORE INTO settings (name, value) VALUES ('contextual_karma', '2500');
-- Karma of corrections, help and format hints.
INSERT OR IGNORE INTO settings (name, value) VALUES ('decorative_karma', '500');
-- zeta: discount per prompt of distance from the newest prompt.
INSERT OR IGNORE INTO settings (name, value) VALUES ('expiring_id_discount', '3.0');
-- tau: discount per minute of age.
INSERT OR IGNORE INTO settings (name, value) VALUES ('expiring_created_at_discount', '300.0');
-- phi: discount per token of length.
INSERT OR IGNORE INTO settings (name, value) VALUES ('len_discount', '0.01');
-- xi: multiplier of karma in the score.
INSERT OR IGNORE INTO settings (name, value) VALUES ('karma_multiplier', '10.0');
-- Prompts scoring below this are never sent.
INSERT OR IGNORE INTO settings (name, value) VALUES ('min_score_to_include_prompt', '0.00001');



-- == core: the HTTP server ==
-- Largest request body accepted, in bytes (larger ones get 413 without being read).
INSERT OR IGNORE INTO settings (name, value) VALUES ('max_body_bytes', '1048576');
-- Seconds in-flight requests get to finish after SIGTERM/SIGINT.
INSERT OR IGNORE INTO settings (name, value) VALUES ('shutdown_grace_secs', '10');



-- == plugins (each feature adds its block below) ==



-- == marat ==
-- Which marat commands wait for a spoken yes: never, unsafe (all but clearly read-only ones), always.
INSERT OR IGNORE INTO settings (name, value) VALUES ('marat_approval', 'unsafe');
-- Seconds one marat command may run before its whole process group is killed.
INSERT OR IGNORE INTO settings (name, value) VALUES ('marat_command_timeout_secs', '30.0');
-- Directory a new session's marat commands start in (~ is the user's home).
INSERT OR IGNORE INTO settings (name, value) VALUES ('marat_start_dir', '~');



-- == settings mode ==



-- == cobol ==
-- Repository cobol works in; empty means the session's working directory (X-Cwd, lmd say --cwd).
INSERT OR IGNORE INTO settings (name, value) VALUES ('cobol_repo', '');
-- Build/test command cobol compiles with; empty means detect it from the repository.
INSERT OR IGNORE INTO settings (name, value) VALUES ('cobol_build_command', '');
-- Seconds a cobol build may run before it and its child processes are killed.
INSERT OR IGNORE INTO settings (name, value) VALUES ('cobol_build_timeout_secs', '300');



-- == lm_score ==
-- Score with an ensemble of calls (ENSEMBLE).
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_ensemble', 'false');
-- How ensemble scores combine: maj (mode) or avg (mean, half up) (AGGREGATION).
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_aggregation', 'maj');
-- Let the model think (THINKING).
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_thinking', 'true');
-- How thinking is suppressed when lm_score_thinking is false.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_thinking_strategy', 'prefill');
-- Members of an ensemble.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_ensemble_size', '5');
-- Temperature of ensemble members.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_temperature', '0.7');
-- Scoring model (empty: openai_model) (MODEL).
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_model', '');
-- Scoring backend URL (empty: openai_chat_endpoint) (SERVER_URL).
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_endpoint', '');
-- text (the model writes the score) or logprob (expected score from logprobs).
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_method', 'text');
-- Most scoring calls in flight at once.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_concurrency', '8');
-- One call at a time (servers without batching).
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_sequential', 'false');
-- Ask for an ensemble in one call with n.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_use_n', 'true');
-- Use the text method when the backend sends no logprobs.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_logprob_fallback', 'false');
-- Alternatives per token (logprob).
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_top_logprobs', '20');
-- Most answer tokens (0: the backend decides).
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_max_tokens', '0');
-- Largest prompt in tokens; bigger contents are refused.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_max_prompt_tokens', '16000');
-- Keep scores in the daemon's database.
INSERT OR IGNORE INTO settings (name, value) VALUES ('lm_score_cache', 'true');



-- == selectit ==
-- Where SelectIT gets rating probabilities: openai (any OpenAI-compatible server with logprobs) or transformers (a local model).
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_backend', 'openai');
-- OpenAI backend endpoint: completions (raw prompt, base models) or chat (instruct models).
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_api', 'completions');
-- Model id for the openai backend (empty = openai_model) or a local model directory for transformers.
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_model', '');
-- Rating-prompt file, one template per line (empty = the built-in prompts).
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_rp_file', '');
-- Rating prompts per sample (k); k > 1 adds the consistency penalty.
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_k', '1');
-- alpha: penalty on the standard deviation across the k prompts.
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_alpha', '0.2');
-- Most prompt tokens; longer sample text is cut, the answer cue kept (openai backend: tokens counted the daemon's way).
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_max_length', '2048');
-- Samples per forward pass (transformers backend).
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_batch_size', '8');
-- Requests in flight at once (openai backend).
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_concurrency', '32');
-- Top logprobs asked of the server (lowered to 5 if the server refuses).
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_top_logprobs', '20');
-- Torch device for the transformers backend (auto = cuda when available, else cpu).
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_device', 'auto');
-- Local model loaded, with a warning, when the transformers model fails to load (empty = stop with an error).
INSERT OR IGNORE INTO settings (name, value) VALUES ('selectit_fallback_model', '');



-- == elo ==
-- Rating method of the /elo page and `lmd elo report`: bt (Bradley–Terry) or online (online Elo).
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_method', 'bt');
-- Online Elo K factor (the Chatbot Arena's 4).
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_k', '4.0');
-- Rating points per factor elo_base of odds (400 in chess and the arena).
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_scale', '400.0');
-- Base of the odds in the Elo formula (10).
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_base', '10.0');
-- Starting rating of online Elo and mean rating of Bradley–Terry.
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_initial', '1000.0');
-- Bootstrap rounds for confidence intervals on the /elo page and in reports (0: none).
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_bootstrap_rounds', '1000');
-- Seed of the bootstrap, so the page shows the same intervals each time (-1: a fresh seed each time).
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_seed', '42');
-- Model that judges battles: a name in the models file, else a model id on openai_chat_endpoint.
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_judge_model', 'gpt-4');
-- Models file (YAML or JSON: name -> base_url, model, api_key_env); empty means LMD_HOME/elo_models.yaml.
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_models_file', '');
-- Backend calls in flight when answering or judging.
INSERT OR IGNORE INTO settings (name, value) VALUES ('elo_concurrency', '8');



-- == clients ==
-- Strip markdown from every text/plain reply on /v1 (voice-only setups); X-Speak: 0 keeps it per request.
INSERT OR IGNORE INTO settings (name, value) VALUES ('speak_plain_replies', 'false');



-- == reliability ==
-- Seconds a request body may take to arrive; slower senders (slowloris) get 408 and lose the connection.
INSERT OR IGNORE INTO settings (name, value) VALUES ('body_read_timeout_secs', '30.0');



-- == surface ==
-- Web origins besides the daemon's own whose pages may call lmd (protected: CLI or token only).
INSERT OR IGNORE INTO settings (name, value) VALUES ('allowed_origins', '[]');
