"""document collection qa model

A document collection's own answering model (``qa_model``): the chat model
the playground's RAG toggle runs when "Collection's model" is chosen, as
Vantiq's Semantic Index names a default Q&A LLM.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26 16:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("document_collection", schema=None) as batch_op:
        batch_op.add_column(sa.Column("qa_model_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            batch_op.f("fk_document_collection_qa_model_id_model"),
            "model",
            ["qa_model_id"],
            ["id"],
        )


def downgrade() -> None:
    with op.batch_alter_table("document_collection", schema=None) as batch_op:
        batch_op.drop_constraint(
            batch_op.f("fk_document_collection_qa_model_id_model"), type_="foreignkey"
        )
        batch_op.drop_column("qa_model_id")
