# relay: the HTTP webhook relay, as a static binary on distroless.
#
#   docker build -t relay .
#   docker run -p 8080:8080 -v "$PWD/hook.pem:/keys/hook.pem:ro" \
#     -e RELAY_REDIS_URL=redis://redis:6379/0 \
#     -e RELAY_PUBLIC_URL=https://relay.example.com \
#     -e RELAY_HOOK_KEY_FILE=/keys/hook.pem -e RELAY_JWT_SECRET relay
#
# Without RELAY_REDIS_URL relay runs on an embedded in-memory Redis, for
# development only.

FROM golang:1.26-bookworm AS build
WORKDIR /src

# Modules first, as their own layer: it is rebuilt only when go.mod or
# go.sum change, not on every source edit.
# hookverify and relayclient are modules of their own that go.mod replaces
# with their directories. go.work is left out: the build list is go.mod's.
COPY go.mod go.sum ./
COPY hookverify/go.mod hookverify/go.sum ./hookverify/
COPY relayclient/go.mod ./relayclient/
RUN GOWORK=off go mod download

COPY . .
RUN GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/relay ./cmd/relay

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/relay /relay
USER nonroot:nonroot
EXPOSE 8080
# Listen on every interface of the container; relay's own default is
# loopback only.
ENV RELAY_LISTEN=0.0.0.0:8080
ENTRYPOINT ["/relay"]
