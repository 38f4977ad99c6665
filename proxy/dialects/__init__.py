"""One module (or small package) per LLM API, sqlglot style: ``dialect`` is the protocol
every other layer calls, ``registry`` lists the dialects, ``base`` is the neutral form
and the byte-exact splice they share, ``recall_wire`` what their ``context_recall`` wires
share, ``usage`` the record their replies fill."""
