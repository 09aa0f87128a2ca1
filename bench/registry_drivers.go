package main

// extraPersistences returns the persistences of the driver modules.
func extraPersistences() map[string]persistenceDriver {
	return map[string]persistenceDriver{
		"postgres":      postgresDriver(),
		"sqlite":        sqliteDriver(),
		"mongodb":       mongodbDriver(),
		"mysql":         mysqlDriver(),
		"redis":         redisPersistenceDriver(),
		"redis-cluster": redisClusterDriver(),
	}
}

// extraTransports returns the transports of the driver modules.
func extraTransports() map[string]transportDriver {
	return map[string]transportDriver{
		"rabbitmq": rabbitmqDriver(),
		"nats":     natsDriver(),
		"redis":    redisDriver(),
		"kafka":    kafkaDriver(),
		"sqs":      sqsDriver(),
		"postgres": postgresTransportDriver(),
	}
}
