package bus

import "github.com/postbus/bus/backend"

// What stores and transports implement lives in package backend; these
// aliases name the same types here, so code written against package bus
// (applications, tests, drivers) builds unchanged.

// The message as stores and transports carry it.

// Envelope is [backend.Envelope].
type Envelope = backend.Envelope

// Kind is [backend.Kind].
type Kind = backend.Kind

// Transports and their optional capabilities.

// Transport is [backend.Transport].
type Transport = backend.Transport

// Topology is [backend.Topology].
type Topology = backend.Topology

// ReceiveOptions is [backend.ReceiveOptions].
type ReceiveOptions = backend.ReceiveOptions

// DeliveryHandler is [backend.DeliveryHandler].
type DeliveryHandler = backend.DeliveryHandler

// TransportIdentity is [backend.TransportIdentity].
type TransportIdentity = backend.TransportIdentity

// BatchTransport is [backend.BatchTransport].
type BatchTransport = backend.BatchTransport

// Outbound is [backend.Outbound].
type Outbound = backend.Outbound

// Persistences, scheduled stores and their optional capabilities.

// Persistence is [backend.Persistence].
type Persistence = backend.Persistence

// ScheduledStore is [backend.ScheduledStore].
type ScheduledStore = backend.ScheduledStore

// OutgoingMessage is [backend.OutgoingMessage].
type OutgoingMessage = backend.OutgoingMessage

// Claim is [backend.Claim].
type Claim = backend.Claim

// OutgoingFailure is [backend.OutgoingFailure].
type OutgoingFailure = backend.OutgoingFailure

// AheadClaimer is [backend.AheadClaimer].
type AheadClaimer = backend.AheadClaimer

// AheadClaim is [backend.AheadClaim].
type AheadClaim = backend.AheadClaim

// DueNotifier is [backend.DueNotifier].
type DueNotifier = backend.DueNotifier

// ClockedStore is [backend.ClockedStore].
type ClockedStore = backend.ClockedStore

// HandOverJoiner is [backend.HandOverJoiner].
type HandOverJoiner = backend.HandOverJoiner

// Clock is [backend.Clock].
type Clock = backend.Clock

// Timer is [backend.Timer].
type Timer = backend.Timer

// Pinger is [backend.Pinger].
type Pinger = backend.Pinger

// PoolReporter is [backend.PoolReporter].
type PoolReporter = backend.PoolReporter

// ConnectionPool is [backend.ConnectionPool].
type ConnectionPool = backend.ConnectionPool

// The outbox, saga, recurring, operations and failed-message stores.

// OutboxStore is [backend.OutboxStore].
type OutboxStore = backend.OutboxStore

// HandlingTx is [backend.HandlingTx].
type HandlingTx = backend.HandlingTx

// TxCarrier is [backend.TxCarrier].
type TxCarrier = backend.TxCarrier

// TxCanceler is [backend.TxCanceler].
type TxCanceler = backend.TxCanceler

// SagaStore is [backend.SagaStore].
type SagaStore = backend.SagaStore

// SagaInstance is [backend.SagaInstance].
type SagaInstance = backend.SagaInstance

// RecurringStore is [backend.RecurringStore].
type RecurringStore = backend.RecurringStore

// RecurringRecord is [backend.RecurringRecord].
type RecurringRecord = backend.RecurringRecord

// RecurringAdvance is [backend.RecurringAdvance].
type RecurringAdvance = backend.RecurringAdvance

// RecurringRuntimeStore is [backend.RecurringRuntimeStore].
type RecurringRuntimeStore = backend.RecurringRuntimeStore

// ScheduledBrowser is [backend.ScheduledBrowser].
type ScheduledBrowser = backend.ScheduledBrowser

// ScheduledQuery is [backend.ScheduledQuery].
type ScheduledQuery = backend.ScheduledQuery

// ScheduledStats is [backend.ScheduledStats].
type ScheduledStats = backend.ScheduledStats

// FailedStore is [backend.FailedStore].
type FailedStore = backend.FailedStore

// FailedMessage is [backend.FailedMessage].
type FailedMessage = backend.FailedMessage

// FailedGroup is [backend.FailedGroup].
type FailedGroup = backend.FailedGroup

// FailedQuery is [backend.FailedQuery].
type FailedQuery = backend.FailedQuery

// The errors stores and transports return.

// PermanentError is [backend.PermanentError].
type PermanentError = backend.PermanentError

// StoreUnavailableError is [backend.StoreUnavailableError].
type StoreUnavailableError = backend.StoreUnavailableError
