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



-- == settings mode ==



-- == cobol ==



-- == lm_score ==



-- == selectit ==



-- == elo ==



-- == clients ==



-- == reliability ==
-- Seconds a request body may take to arrive; slower senders (slowloris) get 408 and lose the connection.
INSERT OR IGNORE INTO settings (name, value) VALUES ('body_read_timeout_secs', '30.0');
