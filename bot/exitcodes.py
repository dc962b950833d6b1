"""Process exit statuses (sysexits.h), documented in the README.

systemd's unit uses ``RestartPreventExitStatus=74 78``: a database that cannot be used as
it is, or a bad config, is not retried (restarting cannot fix either).
"""

OK = 0
EX_USAGE = 64  # wrong command-line usage
EX_UNAVAILABLE = 69  # a channel cannot start (its address is in use, say)
EX_DATADIR = 73  # EX_CANTCREAT: the data directory cannot be created or written
EX_DATABASE = 74  # EX_IOERR: conversations.db / state.db cannot be opened or migrated
EX_SOFTWARE = 70  # an internal error (a bug): the daemon stopped, or a command failed
EX_TEMPFAIL = 75  # another daemon runs on this data directory (try again later)
EX_CONFIG = 78  # invalid configuration (the message names the dotted key)
EX_INTERRUPTED = 130  # 128 + SIGINT: a command stopped by Ctrl-C, as the shell reports it
EX_PIPE = 141  # 128 + SIGPIPE: the reader of the output went away (`| head`), as for cat
