# campaign-sender image: the production binary only, on a minimal non-root runtime (the default,
# last stage). The fake provider, for the staging smoke test (scripts/staging-smoke.sh) only, is
# a stage of its own that nothing else uses; the load harnesses are not built here.
# Not built in this repository's CI (no container engine there); keep it simple enough to
# review:
#   docker build -t campaign-sender:0.1.0 .
#   docker build --target fake-provider -t fake-provider:0.1.0 .
#
# Stage 1: dependencies only, so a source change does not rebuild them.
# The toolchain the project is built and tested with (Cargo.lock needs it).
FROM rust:1.95-slim-bookworm AS deps
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY fake-provider/Cargo.toml fake-provider/
COPY loadtest/Cargo.toml loadtest/
# Stub targets with the manifests' paths (every workspace member must parse), to build and cache
# the production crate's dependency graph.
RUN mkdir -p src benches tests/it tests/fleet fake-provider/src loadtest/src/bin/drain loadtest/src/bin/chaos \
    loadtest/src/bin/days loadtest/src/bin/forget loadtest/src/bin/bloat \
 && echo 'fn main() {}' > src/main.rs \
 && echo '' > src/lib.rs \
 && echo 'fn main() {}' > benches/engine.rs \
 && echo '' > tests/it/main.rs \
 && echo '' > tests/fleet/main.rs \
 && echo '' > fake-provider/src/lib.rs \
 && echo 'fn main() {}' > fake-provider/src/main.rs \
 && echo '' > loadtest/src/lib.rs \
 && echo 'fn main() {}' > loadtest/src/bin/drain/main.rs \
 && echo 'fn main() {}' > loadtest/src/bin/chaos/main.rs \
 && echo 'fn main() {}' > loadtest/src/bin/days/main.rs \
 && echo 'fn main() {}' > loadtest/src/bin/forget/main.rs \
 && echo 'fn main() {}' > loadtest/src/bin/bloat/main.rs \
 && echo 'fn main() {}' > loadtest/src/bin/events.rs \
 && echo 'fn main() {}' > loadtest/src/bin/web.rs \
 && echo 'fn main() {}' > loadtest/src/bin/shares.rs \
 && cargo build --locked --release -p campaign-sender --bin campaign-sender \
 && rm -rf src

# Stage 2: the real build (sqlx's migrations are embedded at compile time from migrations/).
FROM deps AS build
COPY src src
COPY migrations migrations
RUN touch src/main.rs src/lib.rs \
 && cargo build --locked --release -p campaign-sender --bin campaign-sender

# The fake provider (staging smoke test only; never the default target).
FROM deps AS fake-build
COPY fake-provider/src fake-provider/src
RUN touch fake-provider/src/main.rs fake-provider/src/lib.rs \
 && cargo build --locked --release -p fake-provider --bin fake-provider
FROM gcr.io/distroless/cc-debian12:nonroot AS fake-provider
COPY --from=fake-build /src/target/release/fake-provider /usr/local/bin/fake-provider
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/fake-provider", "--listen", "0.0.0.0:8080"]

# Stage 3: runtime. distroless/cc has glibc and CA roots (rustls uses its bundled webpki roots
# anyway), no shell, no package manager; "nonroot" is uid 65532 — the manifests run as 10001,
# which needs no passwd entry.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/campaign-sender /usr/local/bin/campaign-sender
USER 10001:10001
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/campaign-sender"]
CMD ["run"]
