"""Model validation that asks the database about every check constraint in one query.

Django's ``Model.validate_constraints`` asks the database about each ``CheckConstraint`` on its
own: one ``SELECT`` per constraint, inside a savepoint of its own when a transaction is open
(three statements each). A job has seven, its schedule two, so every job made through
``create_job`` or saved from the admin form paid about 27 statements to learn that nothing is
wrong. ``OneQueryChecks`` asks once: every condition is a column of one ``SELECT`` over the
instance's values, each ``COALESCE``'d to true as Django does (a condition that is unknown does
not fail a check constraint in SQL). A failing condition is then handed to Django's own
``validate``, so the error, its message and its code are exactly Django's; unique constraints,
and anything that cannot be asked in one query (a condition over an excluded field, a
database that errs on the query), go to Django's own ``validate`` as before.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from django.core.exceptions import FieldError, ValidationError
from django.db import DatabaseError, connections, router, transaction
from django.db.models import BooleanField, CheckConstraint, ExpressionWrapper, Q, Value
from django.db.models.functions import Coalesce
from django.db.models.sql import Query
from django.db.models.sql.constants import SINGLE


class OneQueryChecks:
    """Mixed into a model: its check constraints validated in one query (module docstring)."""

    def validate_constraints(self, exclude: Any = None) -> None:
        model: Any = self
        using = router.db_for_write(type(model), instance=model)
        pending = [
            (model_class, constraint)
            for model_class, constraints in model.get_constraints()
            for constraint in constraints
        ]
        failing = _failing_checks(model, pending, exclude, using)
        errors: dict[str, Any] = {}
        for model_class, constraint in pending:
            if failing is not None and _asked(constraint) and id(constraint) not in failing:
                continue
            try:
                constraint.validate(model_class, model, exclude=exclude, using=using)
            except ValidationError as error:
                fields = getattr(constraint, "fields", ())
                if getattr(error, "code", None) == "unique" and len(fields) == 1:
                    errors.setdefault(fields[0], []).append(error)
                else:
                    errors = error.update_error_dict(errors)
        if errors:
            raise ValidationError(errors)


def _asked(constraint: Any) -> bool:
    return type(constraint) is CheckConstraint


def _refs(constraint: Any, model_class: Any, exclude: Any) -> bool:
    """Whether the condition names an excluded field: Django's validate passes it untried."""
    return bool(constraint._expression_refs_exclude(model_class, constraint.condition, exclude))


def _failing_checks(
    instance: Any, pending: list[tuple[Any, Any]], exclude: Any, using: str
) -> set[int] | None:
    """The ids of the check constraints whose condition is false for ``instance``, asked in one
    query (constraints compare by value, so they are not kept in a set themselves).

    None when the one query cannot answer (a database without boolean comparisons, or an error
    from the query): every constraint is then validated by Django, one query each.
    """
    connection = connections[using]
    if not connection.features.supports_comparing_boolean_expr:
        return None
    checks = [
        constraint
        for model_class, constraint in pending
        if _asked(constraint) and not (exclude and _refs(constraint, model_class, exclude))
    ]
    if not checks:
        return set()
    query = Query(None)
    against = instance._get_field_expression_map(meta=type(instance)._meta, exclude=exclude)
    for name, value in against.items():
        query.add_annotation(
            value if hasattr(value, "resolve_expression") else Value(value), name, select=False
        )
    asked = []
    for constraint in checks:
        condition = Coalesce(
            ExpressionWrapper(Q(constraint.condition), output_field=BooleanField()),
            Value(True),
            output_field=BooleanField(),
        )
        try:
            query.add_annotation(condition, f"_check_{len(asked)}")
        except FieldError:
            continue  # a field it names is not among the values: Django's validate passes it
        asked.append(constraint)
    if not asked:
        return set()
    scope = transaction.atomic(using=using) if connection.in_atomic_block else nullcontext()
    try:
        with scope:
            row = query.get_compiler(using=using).execute_sql(SINGLE)
    except DatabaseError:
        return None
    if row is None:
        return None
    return {id(constraint) for constraint, holds in zip(asked, row, strict=True) if not holds}
