# Stand-in for python:3.11-slim (test scaffolding of deploy/compose-check; see README.md here).
ARG ROOT_IMAGE=agentr-standin/bookworm:minbase
FROM ${ROOT_IMAGE}
ENV LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive \
    PATH=/usr/local/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# Debian's python3.11 refuses system-wide pip installs (PEP 668); the official image's Python does
# not. A venv first on PATH gives the same behaviour: `pip install` and console scripts just work.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && python3.11 -m venv /usr/local/python \
 && python --version && pip --version
# The host's trusted certificates (deploy/compose-check copies its bundle into the build context):
# where package indexes are reached through a TLS-intercepting proxy, pip verifies them as the host
# does. pip reads PIP_CERT; images built FROM this one inherit it.
COPY host-ca-certificates.crt /etc/ssl/certs/host-ca-certificates.crt
ENV PIP_CERT=/etc/ssl/certs/host-ca-certificates.crt
CMD ["python"]
