"""The splice worker (``agentr worker splice``): revision samples from judged pairs, re-splices after
a reviewer's correction, successful traces as good samples, and an iteration's dataset once it is
complete. Its composition root is ``splice_service.service.build_service``."""
