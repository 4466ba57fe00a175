"""SQLite files: which library drives them (`driver`), a directory or a non-SQLite
file at a database path (`file`), what an error says about damage (`damage`), the
process's file-size limit (`limits`), the original's recovery (`recovery`),
SQLCipher keys (`encryption`), online backups (`backup`) and turning a plain file
into an encrypted one and back (`encrypt`).

Imports allowed (tests/project/test_packages.py checks them):

    errors, config
    encrypt: runtime
"""
