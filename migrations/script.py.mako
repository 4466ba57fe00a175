"""${message}"""

from hermes_store._migrations import _ops

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}


def upgrade() -> None:
    ${upgrades if upgrades else "raise NotImplementedError  # write frozen SQL through _ops"}


def downgrade() -> None:
    ${downgrades if downgrades else "raise NotImplementedError"}
