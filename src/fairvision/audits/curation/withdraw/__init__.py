"""Consent withdrawal: remove a subject everywhere, log it, propose replacements (docs/METHODS.md §13.5).

A dataset is a *samples table* (``sample_id``, ``subject_id``, ``image_path``, attributes; read with
:func:`fairvision.io.tables.read_table`), any number of *derived files* (tables with a ``sample_id`` and/or
``subject_id`` column, and COCO JSON files whose images are named after the samples) and the results store
(:class:`fairvision.io.store.ResultsStore`).

- :mod:`.plan`: :func:`plan_withdrawal` works out, without changing anything, which rows of which file belong to
  the withdrawn subjects, the new content of every file that changes, the store rows, the SHA-256 of the
  subject's image files and, with a candidate pool, a replacement proposal and the group table before and after;
- :mod:`.rewrite`: the new content of tables (other rows keep their bytes in CSV/TSV/JSONL files, their values in
  JSON and Parquet) and COCO files;
- :mod:`.replacement`: the optimal replacement from a candidate pool;
- :mod:`.apply`: :func:`apply_withdrawal` commits a plan as one step, through the durable commit of
  :mod:`fairvision.io.durable`:

  1. under an exclusive lock on the dataset (``.<samples name>.withdraw.lock`` beside the samples table), every
     new file version is written to a temporary name next to its file and synced, with a journal
     (``.<samples name>.withdraw.journal.json``) saying ``prepared`` and naming the temporaries;
  2. the journal is rewritten (atomically, synced) as ``committed``: the commit point;
  3. the renames, image deletions, :meth:`ResultsStore.forget <fairvision.io.store.ResultsStore.forget>` of the
     subjects' image hashes and the audit-log line are done, and the journal is removed;

- :mod:`.journal`: the audit log, the lock, and :func:`recover`. A process killed before the commit point leaves
  the old state (the next run removes the temporaries); one killed after it leaves a committed journal that the
  next :func:`recover` (every ``fairvision curate withdraw`` run starts with it) finishes, each step being
  idempotent (the log line is appended only if its ``withdrawal_id`` is not in the log yet). Tests kill the
  process at :data:`~.journal.CRASH_BEFORE_COMMIT` or :data:`~.journal.CRASH_AFTER_RENAMES` through
  :func:`fairvision.io.durable.crash_point`;
- :mod:`.report`: the changes table, the replacement pairs and the log record of a plan.

The audit log is JSON Lines, opened with ``O_APPEND`` and never rewritten: who, when, which subjects (or their
SHA-256 with ``hash_subject``), every file changed with its row counts and the SHA-256 of its contents before and
after, the SHA-256 of every removed image's bytes (never the image), the store rows removed, the replacements.
"""

from fairvision.audits.curation.withdraw.apply import apply_withdrawal
from fairvision.audits.curation.withdraw.journal import read_log, recover, subject_hash
from fairvision.audits.curation.withdraw.plan import FileChange, WithdrawalPlan, plan_withdrawal
from fairvision.audits.curation.withdraw.replacement import Replacement, match_replacements

__all__ = ["FileChange", "Replacement", "WithdrawalPlan", "apply_withdrawal", "match_replacements", "plan_withdrawal",
           "read_log", "recover", "subject_hash"]
