"""How Spica keeps files, below every stage: content fingerprints (run ids, cache keys) and atomic writes."""
from spica_core.store.files import write_file
from spica_core.store.fingerprint import canonical_json, file_fingerprint, fingerprint

__all__ = ["canonical_json", "fingerprint", "file_fingerprint", "write_file"]
