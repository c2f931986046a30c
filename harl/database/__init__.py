"""The work dir's tuning records: keeping them loadable after a crash."""

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
