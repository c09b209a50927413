#!/usr/bin/env python3
"""Writes a C++ source that holds the schema migrations, so that batonctl knows exactly which schema
it was built for. Usage: embed_migrations.py OUTPUT NNNN_name.sql..."""
import os
import re
import sys

DELIMITER = 'baton_sql'


def main():
    output, inputs = sys.argv[1], sys.argv[2:]
    entries = []
    for path in sorted(inputs, key=os.path.basename):
        match = re.fullmatch(r'(\d{4})_([a-z0-9_]+)\.sql', os.path.basename(path))
        if not match:
            sys.exit(f'{path}: migration files are named NNNN_name.sql')
        with open(path, encoding='utf-8') as f:
            sql = f.read()
        if ')' + DELIMITER + '"' in sql:
            sys.exit(f'{path}: contains the raw-string delimiter')
        entries.append((int(match.group(1)), match.group(2), sql))
    for expected, (version, _, _) in enumerate(entries, start=1):
        if version != expected:
            sys.exit(f'migrations must be numbered 0001, 0002, ... without gaps (found {version:04d})')
    with open(output, 'w', encoding='utf-8') as out:
        out.write('// Generated from schema/*.sql by embed_migrations.py; do not edit.\n')
        out.write('#include "db/migrations.hpp"\n\nnamespace baton::db {\n\n')
        out.write('std::span<const Migration> knownMigrations()\n{\n')
        out.write('    static const Migration migrations[] = {\n')
        for version, name, sql in entries:
            out.write(f'        {{{version}, "{name}", R"{DELIMITER}({sql}){DELIMITER}"}},\n')
        out.write('    };\n    return migrations;\n}\n\n}  // namespace baton::db\n')


if __name__ == '__main__':
    main()
