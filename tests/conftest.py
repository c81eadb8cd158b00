import os

os.environ.setdefault("SECINFER_TESTING", "1")
