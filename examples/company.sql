-- A small company database for the LM_SCORE examples (docs/lm_score.md), written for lmd.
-- examples/company.db is this file run by sqlite3; tests/core/test_examples.py checks they agree.
CREATE TABLE emails (id INTEGER PRIMARY KEY, email TEXT, subject TEXT, body TEXT);
INSERT INTO emails VALUES
  (1, 'ann@example.com', 'Invoice 12', 'Please pay by Friday.'),
  (2, 'bob@example.com', 'Lunch', 'Meet at noon?'),
  (3, 'carla@example.com', 'Card declined', 'My card was declined when I paid the March bill.'),
  (4, 'dev@example.com', 'Standup moved', 'The standup is at 9:30 from Monday on.'),
  (5, 'erik@example.com', 'Refund', 'I was charged twice for order 5531; please refund one.');
CREATE TABLE invoices (id INTEGER PRIMARY KEY, customer TEXT, product TEXT, amount REAL,
                       description TEXT);
INSERT INTO invoices VALUES
  (1, 'Acme', 'CRM licence', 14000, 'Yearly software licence'),
  (2, 'Initech', 'Chairs', 900, 'Office chairs'),
  (3, 'Globex', 'Cloud hosting', 2400, 'Managed servers, twelve months'),
  (4, 'Umbrella', 'Audit', 7800, 'Two weeks of consulting on the books'),
  (5, 'Hooli', 'Laptops', 15600, 'Twelve laptops for the new team');
