# Starts N short-lived child interpreters one after another and waits for each
# (as a test runner does); prints "done" when the last one has been waited for.
import subprocess
import sys

for _ in range(int(sys.argv[1])):
    subprocess.call([sys.executable, "-c", "pass"])
print("done")
